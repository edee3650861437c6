// How a failed Redlock vote is read: a held key or a slow master is "busy, retry", only masters
// that are unreachable outright make a lost quorum (UNAVAILABLE).
import { ExecutionError, Redlock, ResourceLockedError } from '@sesamecare-oss/redlock';
import { HttpConfig, LocksConfig } from '../config/app-config';
import { UnavailableError } from '../common/domain-errors';
import { LockService } from './lock.service';

const masters = [{}, {}, {}];
function failWith(...errors: Error[]): void {
  const votesAgainst = new Map(errors.map((e, i) => [masters[i] as never, e]));
  const stats = { membershipSize: 3, quorumSize: 2, votesFor: new Set(), votesAgainst };
  jest.spyOn(Redlock.prototype, 'acquire').mockRejectedValue(new ExecutionError('no quorum', [Promise.resolve(stats as never)]));
}
const service = () =>
  new LockService({ extend: false } as LocksConfig, { retryAfterS: 1 } as HttpConfig, masters as never, { dependencyErrors: { inc: jest.fn() } } as never);
const timedOut = () => new Error('Command timed out');
const closed = () => new Error("Stream isn't writeable and enableOfflineQueue options is false");

afterEach(() => jest.restoreAllMocks());

describe('LockService.tryAcquire', () => {
  it('should call the lock busy when live masters voted it held', async () => {
    failWith(new ResourceLockedError('held'), new ResourceLockedError('held'), closed());
    await expect(service().tryAcquire('k', 1000)).resolves.toBeNull();
  });

  it('should call the lock busy, not lost, when a frozen master and a slow live one both timed out', async () => {
    failWith(timedOut(), timedOut(), new ResourceLockedError('held'));
    await expect(service().tryAcquire('k', 1000)).resolves.toBeNull();
  });

  it('should answer UNAVAILABLE when two of three masters are unreachable', async () => {
    failWith(closed(), closed(), new ResourceLockedError('held'));
    await expect(service().tryAcquire('k', 1000)).rejects.toBeInstanceOf(UnavailableError);
  });
});
