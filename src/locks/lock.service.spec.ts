// How a failed Redlock vote is read: a held key or a slow master is "busy, retry"; masters that are
// unreachable outright, or silent for two REDIS_TIMEOUT_MS, make a lost quorum (UNAVAILABLE).
import { ExecutionError, Redlock, ResourceLockedError } from '@sesamecare-oss/redlock';
import { HttpConfig, LocksConfig, RedisTopology } from '../config/app-config';
import { UnavailableError } from '../common/domain-errors';
import { LockService } from './lock.service';

const masters = [{}, {}, {}];
function failWith(...errors: Error[]): void {
  const votesAgainst = new Map(errors.map((e, i) => [masters[i] as never, e]));
  const stats = { membershipSize: 3, quorumSize: 2, votesFor: new Set(), votesAgainst };
  jest.spyOn(Redlock.prototype, 'acquire').mockRejectedValue(new ExecutionError('no quorum', [Promise.resolve(stats as never)]));
}
const REDIS_TIMEOUT_MS = 300;
const QUORUM: RedisTopology = { kind: 'standalone', url: 'redis://a', lockUrls: ['redis://a', 'redis://b', 'redis://c'] };
const service = (topology: RedisTopology = QUORUM) =>
  new LockService(
    { extend: false } as LocksConfig,
    { retryAfterS: 1 } as HttpConfig,
    { timeoutMs: REDIS_TIMEOUT_MS, topology },
    masters as never,
    { dependencyErrors: { inc: jest.fn() } } as never,
  );
const start = Date.now();
/** The clock `ms` after the test file started. */
const at = (ms: number) => jest.spyOn(Date, 'now').mockReturnValue(start + ms);
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

  it('should answer UNAVAILABLE once the masters that time out have been silent for two REDIS_TIMEOUT_MS', async () => {
    at(0);
    const locks = service();
    failWith(timedOut(), timedOut(), new ResourceLockedError('held'));
    at(2 * REDIS_TIMEOUT_MS + 50);
    await expect(locks.tryAcquire('k', 1000)).rejects.toBeInstanceOf(UnavailableError);
  });

  it('should take a timed-out vote on a Redis Cluster for its shard lost (UNAVAILABLE), however recently the cluster answered', async () => {
    at(0);
    const locks = service({ kind: 'cluster', nodes: ['redis://a', 'redis://b', 'redis://c'] });
    const votesAgainst = new Map([[masters[0] as never, timedOut()]]);
    const stats = { membershipSize: 1, quorumSize: 1, votesFor: new Set(), votesAgainst };
    jest.spyOn(Redlock.prototype, 'acquire').mockRejectedValue(new ExecutionError('no quorum', [Promise.resolve(stats as never)]));
    await expect(locks.tryAcquire('k', 1000)).rejects.toBeInstanceOf(UnavailableError);
  });

  it('should call the lock busy, not lost, when a Redis Cluster vote met a slot on the move (MOVED, a stale pipeline)', async () => {
    const locks = service({ kind: 'cluster', nodes: ['redis://a'] });
    for (const moving of [new Error('MOVED 173 127.0.0.1:7002'), new Error('All keys in the pipeline should belong to the same slots allocation group')]) {
      const stats = { membershipSize: 1, quorumSize: 1, votesFor: new Set(), votesAgainst: new Map([[masters[0] as never, moving]]) };
      jest.spyOn(Redlock.prototype, 'acquire').mockRejectedValue(new ExecutionError('no quorum', [Promise.resolve(stats as never)]));
      await expect(locks.tryAcquire('k', 1000)).resolves.toBeNull();
    }
  });

  it('should keep calling a timed-out master slow, not lost, while it answered another vote within two REDIS_TIMEOUT_MS', async () => {
    at(0);
    const locks = service();
    at(2 * REDIS_TIMEOUT_MS + 50);
    failWith(new ResourceLockedError('held'), new ResourceLockedError('held'), new ResourceLockedError('held'));
    await expect(locks.tryAcquire('k', 1000)).resolves.toBeNull();
    failWith(timedOut(), timedOut(), closed());
    at(2 * REDIS_TIMEOUT_MS + 50 + REDIS_TIMEOUT_MS);
    await expect(locks.tryAcquire('k', 1000)).resolves.toBeNull();
  });
});
