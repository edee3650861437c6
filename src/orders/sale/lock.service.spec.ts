// How a failed Redlock vote is read: a held key or a slow master is "busy, retry"; masters that are
// unreachable outright, or silent for two REDIS_TIMEOUT_MS, make a lost quorum (UNAVAILABLE). A
// vote is read by its error's class and its master's connection, never by the error's text. And
// what a failed extension of a held lock does: counted by reason, and told to the holder.
import { ExecutionError, Lock, Redlock, ResourceLockedError } from '@sesamecare-oss/redlock';
import { ReplyError } from 'ioredis';
import { HttpConfig, LocksConfig, RedisTopology } from '../../config/app-config';
import { UnavailableError } from '../../common/domain-errors';
import { LockService } from './lock.service';

type Status = 'ready' | 'reconnecting';
/**
 * The lock masters as the service sees them: their connection state, and their answer to the PING
 * that asks a long-silent master whether it lives (none by default: a frozen master).
 */
const masters: Array<{ status: Status; ping: jest.Mock }> = [0, 1, 2].map(() => ({ status: 'ready', ping: jest.fn() }));
beforeEach(() => masters.forEach((m) => m.ping.mockReset().mockRejectedValue(new Error('Command timed out'))));
/** One master's vote against: the error Redlock recorded, and the state its connection is in. */
type Vote = { error: Error; status: Status };

function stats(...votes: Vote[]) {
  votes.forEach((v, i) => (masters[i].status = v.status));
  const votesAgainst = new Map(votes.map((v, i) => [masters[i] as never, v.error]));
  return {
    membershipSize: votes.length,
    quorumSize: Math.floor(votes.length / 2) + 1,
    votesFor: new Set(),
    votesAgainst,
  };
}
function failWith(...votes: Vote[]): void {
  jest
    .spyOn(Redlock.prototype, 'acquire')
    .mockRejectedValue(new ExecutionError('no quorum', [Promise.resolve(stats(...votes) as never)]));
}
const REDIS_TIMEOUT_MS = 300;
const QUORUM: RedisTopology = {
  kind: 'standalone',
  url: 'redis://a',
  lockUrls: ['redis://a', 'redis://b', 'redis://c'],
};
function metrics() {
  return {
    dependencyErrors: { inc: jest.fn() },
    lockExtensions: { inc: jest.fn() },
    lockExtensionFailures: { inc: jest.fn() },
  };
}
const service = (topology: RedisTopology = QUORUM, m = metrics(), locks: Partial<LocksConfig> = { extend: false }) =>
  new LockService(
    locks as LocksConfig,
    { retryAfterS: 1 } as HttpConfig,
    { timeoutMs: REDIS_TIMEOUT_MS, topology },
    masters as never,
    m as never,
  );
const start = Date.now();
/** The clock `ms` after the test file started. */
const at = (ms: number) => jest.spyOn(Date, 'now').mockReturnValue(start + ms);
const held = (): Vote => ({ error: new ResourceLockedError('held'), status: 'ready' });
/** ioredis's command timeout: a plain Error on a connection that stays up. */
const timedOut = (): Vote => ({ error: new Error('Command timed out'), status: 'ready' });
/** ioredis failing a command at once on a connection that is down (no offline queue). */
const closed = (): Vote => ({
  error: new Error("Stream isn't writeable and enableOfflineQueue options is false"),
  status: 'reconnecting',
});
/** An error reply of the Redis server itself. */
const replied = (): Vote => ({
  error: new (ReplyError as new (message: string) => Error)('ERR something went wrong'),
  status: 'ready',
});

afterEach(() => {
  jest.restoreAllMocks();
  jest.useRealTimers();
});

describe('LockService.tryAcquire', () => {
  it('should call the lock busy when live masters voted it held', async () => {
    failWith(held(), held(), closed());
    await expect(service().tryAcquire('k', 1000)).resolves.toBeNull();
  });

  it('should call the lock busy, not lost, when a frozen master and a slow live one both timed out', async () => {
    failWith(timedOut(), timedOut(), held());
    await expect(service().tryAcquire('k', 1000)).resolves.toBeNull();
  });

  it('should answer UNAVAILABLE when two of three masters are unreachable', async () => {
    failWith(closed(), closed(), held());
    await expect(service().tryAcquire('k', 1000)).rejects.toBeInstanceOf(UnavailableError);
  });

  it("should tell no reply from a lost connection by the master's connection, whatever the error's text says", async () => {
    const odd = (status: Status): Vote => ({ error: new Error('some other wording'), status });
    failWith(odd('ready'), odd('ready'), held());
    await expect(service().tryAcquire('k', 1000)).resolves.toBeNull();
    failWith({ ...timedOut(), status: 'reconnecting' }, { ...timedOut(), status: 'reconnecting' }, held());
    await expect(service().tryAcquire('k', 1000)).rejects.toBeInstanceOf(UnavailableError);
  });

  it('should take masters that answered with a Redis error reply for lost', async () => {
    failWith(replied(), replied(), held());
    await expect(service().tryAcquire('k', 1000)).rejects.toBeInstanceOf(UnavailableError);
  });

  it('should answer UNAVAILABLE once the masters that time out have been silent for two REDIS_TIMEOUT_MS and do not answer a PING', async () => {
    at(0);
    const locks = service();
    failWith(timedOut(), timedOut(), held());
    at(2 * REDIS_TIMEOUT_MS + 50);
    await expect(locks.tryAcquire('k', 1000)).rejects.toBeInstanceOf(UnavailableError);
  });

  it('should ask a long-silent master whose vote timed out whether it lives, once for all waiting orders, and call it slow when it answers', async () => {
    at(0);
    const locks = service();
    masters.forEach((m) => m.ping.mockResolvedValue('PONG'));
    failWith(timedOut(), timedOut(), closed());
    at(2 * REDIS_TIMEOUT_MS + 50);
    const orders = await Promise.all([locks.tryAcquire('k', 1000), locks.tryAcquire('k', 1000)]);
    expect(orders).toEqual([null, null]);
    expect(masters.map((m) => m.ping.mock.calls.length)).toEqual([1, 1, 0]);
  });

  it('should count a master lost without asking again for two REDIS_TIMEOUT_MS after its PING went unanswered', async () => {
    at(0);
    const locks = service();
    failWith(timedOut(), timedOut(), held());
    at(2 * REDIS_TIMEOUT_MS + 50);
    await expect(locks.tryAcquire('k', 1000)).rejects.toBeInstanceOf(UnavailableError);
    at(3 * REDIS_TIMEOUT_MS);
    await expect(locks.tryAcquire('k', 1000)).rejects.toBeInstanceOf(UnavailableError);
    expect(masters.map((m) => m.ping.mock.calls.length)).toEqual([1, 1, 0]);
  });

  it('should take a timed-out vote on a Redis Cluster for its shard lost (UNAVAILABLE), however recently the cluster answered', async () => {
    at(0);
    const locks = service({ kind: 'cluster', nodes: ['redis://a', 'redis://b', 'redis://c'] });
    failWith(timedOut());
    await expect(locks.tryAcquire('k', 1000)).rejects.toBeInstanceOf(UnavailableError);
  });

  it('should call the lock busy, not lost, when a Redis Cluster vote met a slot on the move (MOVED, a stale pipeline)', async () => {
    const locks = service({ kind: 'cluster', nodes: ['redis://a'] });
    for (const moving of [
      new Error('MOVED 173 127.0.0.1:7002'),
      new Error('All keys in the pipeline should belong to the same slots allocation group'),
    ]) {
      failWith({ error: moving, status: 'ready' });
      await expect(locks.tryAcquire('k', 1000)).resolves.toBeNull();
    }
  });

  it('should keep calling a timed-out master slow, not lost, while it answered another vote within two REDIS_TIMEOUT_MS', async () => {
    at(0);
    const locks = service();
    at(2 * REDIS_TIMEOUT_MS + 50);
    failWith(held(), held(), held());
    await expect(locks.tryAcquire('k', 1000)).resolves.toBeNull();
    failWith(timedOut(), timedOut(), closed());
    at(2 * REDIS_TIMEOUT_MS + 50 + REDIS_TIMEOUT_MS);
    await expect(locks.tryAcquire('k', 1000)).resolves.toBeNull();
  });
});

describe('LockService: a held lock whose extension fails', () => {
  const TTL_MS = 40;
  // The extensions run on timers (every TTL_MS / 2): the spec moves the clock itself, so that a
  // loaded machine, which fires a real timer late, changes nothing it sees.
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());
  /** A lock taken, then `extend` failing with `failure`. */
  function holding(failure: Error) {
    jest
      .spyOn(Redlock.prototype, 'acquire')
      .mockResolvedValue({ attempts: [Promise.resolve({ votesFor: new Set() })] } as unknown as Lock);
    const extend = jest.spyOn(Redlock.prototype, 'extend').mockRejectedValue(failure);
    jest.spyOn(Redlock.prototype, 'release').mockResolvedValue({ attempts: [], start: 0 });
    const m = metrics();
    return { locks: service(QUORUM, m, { extend: true }), metrics: m, extend };
  }
  const pause = (ms: number) => jest.advanceTimersByTimeAsync(ms);

  it.each([
    [
      'not_held',
      "the masters answered that the key is no longer this holder's",
      () => new ExecutionError('no quorum', [Promise.resolve(stats(held(), held(), held()) as never)]),
    ],
    [
      'unreachable',
      'too few masters answered',
      () => new ExecutionError('no quorum', [Promise.resolve(stats(closed(), closed(), held()) as never)]),
    ],
    [
      'expired',
      'the lock had run out before the extension was due',
      () => new ExecutionError('Cannot extend an already-expired lock.', []),
    ],
    ['error', 'anything else failed', () => new Error('boom')],
  ])('should count it as %s when %s, tell the holder, and stop extending', async (reason, _when, failure) => {
    const h = holding(failure());
    const lock = await h.locks.tryAcquire('k', TTL_MS);
    expect(lock?.lost).toBeNull();
    await pause(TTL_MS * 2);
    expect(lock?.lost).toEqual({ reason, cause: expect.any(Error) });
    expect(h.metrics.lockExtensionFailures.inc).toHaveBeenCalledWith({ reason });
    expect(h.metrics.lockExtensionFailures.inc).toHaveBeenCalledTimes(1);
    expect(h.extend).toHaveBeenCalledTimes(1);
    expect(h.metrics.lockExtensions.inc).not.toHaveBeenCalled();
  });

  it('should count nothing lost when the holder released the lock while its extension was on the way', async () => {
    const h = holding(new ExecutionError('no quorum', [Promise.resolve(stats(held(), held(), held()) as never)]));
    let releasing: Promise<void> | undefined;
    h.extend.mockImplementation(async () => {
      // The release overtakes the extension, whose script then finds the key gone.
      releasing = h.locks.release(lock as never);
      await releasing;
      throw new ExecutionError('no quorum', [Promise.resolve(stats(held(), held(), held()) as never)]);
    });
    const lock = await h.locks.tryAcquire('k', TTL_MS);
    await pause(TTL_MS * 2);
    expect(releasing).toBeDefined();
    expect(lock?.lost).toBeNull();
    expect(h.metrics.lockExtensionFailures.inc).not.toHaveBeenCalled();
  });

  it('should keep extending a lock while its extensions succeed, and count them', async () => {
    const h = holding(new Error('unused'));
    h.extend.mockImplementation(async (lock: Lock) => lock);
    const lock = await h.locks.tryAcquire('k', TTL_MS);
    // Twice the TTL: an extension every half TTL, four in all.
    await pause(TTL_MS * 2);
    await h.locks.release(lock as never);
    expect(h.extend).toHaveBeenCalledTimes(4);
    expect(h.metrics.lockExtensions.inc).toHaveBeenCalledTimes(4);
    expect(lock?.lost).toBeNull();
  });
});

describe('LockService: fencing tokens', () => {
  /** A lock taken at once; each master counts the token with `incr` and raises it with `raiseFence`. */
  function taking() {
    jest
      .spyOn(Redlock.prototype, 'acquire')
      .mockResolvedValue({ attempts: [Promise.resolve({ votesFor: new Set() })] } as unknown as Lock);
    const release = jest.spyOn(Redlock.prototype, 'release').mockResolvedValue({ attempts: [], start: 0 });
    const counters = masters.map(() => ({ incr: jest.fn(), raiseFence: jest.fn() }));
    masters.forEach((m, i) => Object.assign(m, counters[i], { status: 'ready' }));
    const m = metrics();
    return { locks: service(QUORUM, m), metrics: m, counters, release };
  }
  afterEach(() => masters.forEach((m) => Object.assign(m, { incr: undefined, raiseFence: undefined })));
  const never = () => new Promise<number>(() => undefined);

  it('should draw the token from the counter on every master and take the highest of the first quorum of counts', async () => {
    const t = taking();
    t.counters[0].incr.mockResolvedValue(4);
    t.counters[1].incr.mockResolvedValue(7);
    t.counters[2].incr.mockImplementation(never);
    const held = await t.locks.tryAcquire('lock:stock:1:0', 1000, 'fence:{lock:stock:1:0}');
    expect(held?.token).toBe(7);
    for (const c of t.counters) expect(c.incr).toHaveBeenCalledWith('fence:{lock:stock:1:0}');
  });

  it('should take a lock without a token when no counter is named', async () => {
    const t = taking();
    const held = await t.locks.tryAcquire('lock:order:u1', 1000);
    expect(held?.token).toBeNull();
    for (const c of t.counters) expect(c.incr).not.toHaveBeenCalled();
  });

  it('should let the lock go and call the try busy when too few masters count its token', async () => {
    const t = taking();
    t.counters[0].incr.mockResolvedValue(4);
    t.counters[1].incr.mockRejectedValue(new Error('Command timed out'));
    t.counters[2].incr.mockRejectedValue(new Error('Command timed out'));
    await expect(t.locks.tryAcquire('lock:stock:1:0', 1000, 'fence:{lock:stock:1:0}')).resolves.toBeNull();
    expect(t.release).toHaveBeenCalledTimes(1);
    expect(t.metrics.dependencyErrors.inc).toHaveBeenCalledWith({ dependency: 'redis' });
  });

  it('should not leave a token that failed before the vote was in unhandled (an unhandled rejection ends the process)', async () => {
    const unhandled = jest.fn();
    process.on('unhandledRejection', unhandled);
    try {
      let refuse: (e: Error) => void = () => undefined;
      jest.spyOn(Redlock.prototype, 'acquire').mockReturnValue(new Promise((_, reject) => (refuse = reject)));
      masters.forEach((m) =>
        Object.assign(m, { incr: jest.fn().mockRejectedValue(new Error("Stream isn't writeable")), status: 'ready' }),
      );
      const trying = service().tryAcquire('lock:stock:1:0', 1000, 'fence:{lock:stock:1:0}');
      await new Promise((r) => setTimeout(r, 20));
      refuse(new ExecutionError('no quorum', [Promise.resolve(stats(closed(), closed(), closed()) as never)]));
      await expect(trying).rejects.toBeInstanceOf(UnavailableError);
      await new Promise((r) => setTimeout(r, 20));
      expect(unhandled).not.toHaveBeenCalled();
    } finally {
      process.removeListener('unhandledRejection', unhandled);
    }
  });

  it("should raise the counter on every master to PostgreSQL's fence, counting a master that did not answer", async () => {
    const t = taking();
    t.counters[0].raiseFence.mockResolvedValue(9);
    t.counters[1].raiseFence.mockRejectedValue(new Error('Connection is closed.'));
    t.counters[2].raiseFence.mockResolvedValue(12);
    await t.locks.raiseFence('fence:{lock:stock:1:0}', 9);
    for (const c of t.counters) expect(c.raiseFence).toHaveBeenCalledWith('fence:{lock:stock:1:0}', 9);
    expect(t.metrics.dependencyErrors.inc).toHaveBeenCalledTimes(1);
  });
});
