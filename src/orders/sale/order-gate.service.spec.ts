// How an order is opened on each Redis topology: one script with the user lock on a single Redis,
// the hint script then a SET NX PX of its own on a Redis Cluster (the user lock hashes to another slot).
import type { HttpConfig, LocksConfig, RedisTopology, ResolvedRedisConfig } from '../../config/app-config';
import { OrderInProgressError, UnavailableError } from '../../common/domain-errors';
import type { ProductInfo } from '../../inventory/product.types';
import { OrderGateService } from './order-gate.service';
import type { Entry, OrderPass } from './sale';

/** The pass of an opened order; fails the test on a sold-out answer. */
function opened(entry: Entry): OrderPass {
  if (entry.kind !== 'open') throw new Error(`expected an open order, got ${entry.kind}`);
  return entry.pass;
}

const product = { id: 7, layoutVersion: 2 } as ProductInfo;
const STANDALONE: RedisTopology = { kind: 'standalone', url: 'redis://a', lockUrls: ['redis://a'] };
const CLUSTER: RedisTopology = { kind: 'cluster', nodes: ['redis://n1:7000'] };

function gate(topology: RedisTopology, beginReply: number[] = [1, 5, 3]) {
  const redis = {
    beginOrder: jest.fn(async (..._args: unknown[]) => beginReply),
    set: jest.fn(async (..._args: unknown[]): Promise<string | null> => 'OK'),
    endOrder: jest.fn(async (..._args: unknown[]) => 1),
  };
  const down = new Set<string>();
  // Each key its own master, so a test can say which one failed.
  const reach = {
    masterOf: (key: string) => key,
    isDown: (master: string) => down.has(master),
    markDown: (master: string) => down.add(master),
  };
  const metrics = { dependencyErrors: { inc: jest.fn() }, soldOutShortCircuits: { inc: jest.fn() } };
  const service = new OrderGateService(
    redis as never,
    { topology } as ResolvedRedisConfig,
    { userTtlMs: 1500 } as LocksConfig,
    { retryAfterS: 1 } as HttpConfig,
    metrics as never,
    reach as never,
  );
  return { service, redis, down, metrics };
}

describe('OrderGateService.enter', () => {
  it('should open an order on one Redis with one script that also takes the user lock', async () => {
    const g = gate(STANDALONE);
    const pass = opened(await g.service.enter(product, 'u1'));
    expect(g.redis.beginOrder.mock.calls[0].slice(0, 5)).toEqual([
      4,
      'hint:soldout:{7}',
      'hint:empty:{7}:2',
      'hint:stockgen:{7}',
      'lock:order:u1',
    ]);
    expect(g.redis.set).not.toHaveBeenCalled();
    expect(pass).toMatchObject({ userId: 'u1', generation: 5, empty: new Set([3]) });
    expect(pass.token).not.toBeNull();
  });

  it("should answer ORDER_IN_PROGRESS on one Redis when the script finds the user's lock held", async () => {
    const g = gate(STANDALONE, [0]);
    await expect(g.service.enter(product, 'u1')).rejects.toBeInstanceOf(OrderInProgressError);
  });

  it('should answer UNAVAILABLE when the hint Redis fails and is also the one lock master', async () => {
    const g = gate(STANDALONE);
    g.redis.beginOrder.mockRejectedValueOnce(new Error('Connection is closed.'));
    await expect(g.service.enter(product, 'u1')).rejects.toBeInstanceOf(UnavailableError);
  });

  it('should release, with its own token, the user lock a script that timed out may still take on one Redis', async () => {
    const g = gate(STANDALONE);
    g.redis.beginOrder.mockRejectedValueOnce(new Error('Command timed out'));
    await expect(g.service.enter(product, 'u1')).rejects.toBeInstanceOf(UnavailableError);
    const token = g.redis.beginOrder.mock.calls[0][5];
    expect(typeof token).toBe('string');
    expect(g.redis.endOrder.mock.calls).toEqual([['lock:order:u1', token]]);
  });

  it('should count a failed entry once, its release failing too', async () => {
    const g = gate(STANDALONE);
    g.redis.beginOrder.mockRejectedValueOnce(new Error('Command timed out'));
    g.redis.endOrder.mockRejectedValueOnce(new Error('Command timed out'));
    await expect(g.service.enter(product, 'u1')).rejects.toBeInstanceOf(UnavailableError);
    await new Promise((resolve) => setImmediate(resolve));
    expect(g.redis.endOrder).toHaveBeenCalledTimes(1);
    expect(g.metrics.dependencyErrors.inc).toHaveBeenCalledTimes(1);
  });

  it('should release nothing when an order opens, nor when the script answers that the lock is held', async () => {
    const g = gate(STANDALONE);
    g.redis.beginOrder.mockResolvedValueOnce([0]);
    await expect(g.service.enter(product, 'u1')).rejects.toBeInstanceOf(OrderInProgressError);
    opened(await g.service.enter(product, 'u2'));
    expect(g.redis.endOrder).not.toHaveBeenCalled();
  });

  it('should go on without hints and without a user lock when a hint Redis that is not the lock fails', async () => {
    const g = gate({ kind: 'standalone', url: 'redis://a', lockUrls: ['redis://b', 'redis://c', 'redis://d'] });
    g.redis.beginOrder.mockRejectedValueOnce(new Error('Connection is closed.'));
    await expect(g.service.enter(product, 'u1')).resolves.toEqual({
      kind: 'open',
      pass: { userId: 'u1', token: null, generation: null, empty: new Set() },
    });
  });

  it('should read the hints of one slot, then take the user lock with its own SET NX PX on a Redis Cluster', async () => {
    const g = gate(CLUSTER);
    const pass = opened(await g.service.enter(product, 'u1'));
    expect(g.redis.beginOrder.mock.calls[0].slice(0, 4)).toEqual([
      3,
      'hint:soldout:{7}',
      'hint:empty:{7}:2',
      'hint:stockgen:{7}',
    ]);
    expect(g.redis.set).toHaveBeenCalledWith('lock:order:u1', pass.token, 'PX', 1500, 'NX');
    expect(pass.token).not.toBeNull();
  });

  it('should refuse a sold-out product on a Redis Cluster without taking the user lock', async () => {
    const g = gate(CLUSTER, [-1]);
    await expect(g.service.enter(product, 'u1')).resolves.toEqual({ kind: 'soldOut' });
    expect(g.redis.set).not.toHaveBeenCalled();
  });

  it("should answer ORDER_IN_PROGRESS on a Redis Cluster when the user's lock is held", async () => {
    const g = gate(CLUSTER);
    g.redis.set.mockResolvedValueOnce(null);
    await expect(g.service.enter(product, 'u1')).rejects.toBeInstanceOf(OrderInProgressError);
  });

  it('should go on without the user lock when its cluster master fails, and pass that master over for the next order', async () => {
    const g = gate(CLUSTER);
    g.redis.set.mockRejectedValueOnce(new Error('Connection is closed.'));
    expect(opened(await g.service.enter(product, 'u1')).token).toBeNull();
    expect(g.down.has('lock:order:u1')).toBe(true);
    expect(opened(await g.service.enter(product, 'u1')).token).toBeNull();
    expect(g.redis.set).toHaveBeenCalledTimes(1);
    // The SET that failed may still run: released with its token, which the order goes on without.
    expect(g.redis.endOrder.mock.calls).toEqual([['lock:order:u1', g.redis.set.mock.calls[0][1]]]);
  });

  it('should go on without hints when the product hints master fails on a Redis Cluster, still taking the user lock', async () => {
    const g = gate(CLUSTER);
    g.redis.beginOrder.mockRejectedValueOnce(new Error('Connection is closed.'));
    const pass = opened(await g.service.enter(product, 'u1'));
    expect(pass).toMatchObject({ generation: null, empty: new Set() });
    expect(pass.token).not.toBeNull();
    await g.service.enter(product, 'u2');
    expect(g.redis.beginOrder).toHaveBeenCalledTimes(1);
    // The hint script takes no user lock on a cluster: nothing to release.
    expect(g.redis.endOrder).not.toHaveBeenCalled();
  });
});
