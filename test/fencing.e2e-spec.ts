// Fencing tokens against the real PostgreSQL and Redis: every sale write (one order, a batch, an
// order spread over segments) stores the token of the lock it was made under, and PostgreSQL
// refuses a write whose token is below the one stored, even where the segment still holds the
// units (the conditional write alone would let it through). The writes that take no Redis lock
// (units coming back, restock, rebalance) leave the fence alone. And the counter that hands the
// tokens out is raised to a fence PostgreSQL holds, never lowered.
import Redis from 'ioredis';
import { DataSource } from 'typeorm';
import { HttpConfig } from '../src/config/app-config';
import { dataSourceOptions } from '../src/infrastructure/data-source';
import { lockKeys } from '../src/infrastructure/redis-keys';
import { defineScripts, runScript } from '../src/infrastructure/redis-scripts';
import { MetricsService } from '../src/metrics/metrics.service';
import { Fenced } from '../src/orders/order.types';
import { SaleWritesRepository } from '../src/orders/repositories/sale-writes.repository';
import { auditProduct, productWithSegments, resetState, withDb } from './support/database';
import { testUrls } from './support/service';

describe('fencing tokens: sale writes on PostgreSQL', () => {
  let db: DataSource;
  let metrics: MetricsService;
  let repo: SaleWritesRepository;

  beforeAll(async () => {
    db = await new DataSource(dataSourceOptions(testUrls().databaseUrl, { poolSize: 4 })).initialize();
    metrics = new MetricsService();
    repo = new SaleWritesRepository(db, { retryAfterS: 1 } as HttpConfig, metrics);
  });
  afterAll(async () => {
    await db?.destroy();
  });
  beforeEach(() => resetState());

  const product = (segments: number[]) => productWithSegments(segments, 'fenced');
  const segments = (productId: number) =>
    withDb(
      async (c) =>
        (
          await c.query<{ idx: number; stock: number; fence: number }>(
            'SELECT idx, stock::int AS stock, fence::int AS fence FROM stock_segments WHERE product_id = $1 ORDER BY idx',
            [productId],
          )
        ).rows,
    );
  const refusals = async () =>
    (await metrics.registry.getSingleMetric('flashsale_fenced_writes_total')?.get())?.values[0]?.value ?? 0;

  it("should store each accepted write's token and refuse a lower one with nothing written, though the segment holds the units", async () => {
    const p = await product([10]);
    expect(await repo.sellFromSegment(p, 0, 5, 1, 'newer')).toMatchObject({ kind: 'sold', remaining: 9 });
    const stale = await repo.sellFromSegment(p, 0, 4, 1, 'stale');
    expect(stale).toEqual<Fenced>({ kind: 'fenced', segment: 0, token: 4, fence: 5 });
    expect(await segments(p)).toEqual([{ idx: 0, stock: 9, fence: 5 }]);
    expect(await auditProduct(p)).toMatchObject({ orders: 1, ordered: 1, remaining: 9 });
    expect(await refusals()).toBe(1);
    // The same take writing again, and a newer one, pass.
    expect(await repo.sellFromSegment(p, 0, 5, 1, 'again')).toMatchObject({ kind: 'sold' });
    expect(await repo.sellFromSegment(p, 0, 6, 1, 'newest')).toMatchObject({ kind: 'sold' });
    expect(await segments(p)).toEqual([{ idx: 0, stock: 7, fence: 6 }]);
  });

  it('should refuse a whole batch under a stale token: no order of it inserted, the segment untouched', async () => {
    const p = await product([10]);
    await repo.sellFromSegment(p, 0, 8, 1, 'newer');
    const stale = await repo.sellBatch(p, 0, 7, [
      { userId: 'a', quantity: 1 },
      { userId: 'b', quantity: 2 },
    ]);
    expect(stale).toEqual<Fenced>({ kind: 'fenced', segment: 0, token: 7, fence: 8 });
    expect(await segments(p)).toEqual([{ idx: 0, stock: 9, fence: 8 }]);
    expect(await auditProduct(p)).toMatchObject({ orders: 1 });
    const fresh = await repo.sellBatch(p, 0, 9, [
      { userId: 'a', quantity: 1 },
      { userId: 'b', quantity: 2 },
    ]);
    expect(fresh).toMatchObject({ kind: 'decided', remaining: 6 });
    expect(await segments(p)).toEqual([{ idx: 0, stock: 6, fence: 9 }]);
  });

  it('should roll back an order spread over segments when one of its tokens is stale, naming that segment', async () => {
    const p = await product([1, 2]);
    await repo.sellFromSegment(p, 1, 3, 1, 'newer');
    const stale = await repo.sellFromSegments(p, [0, 1], [4, 2], 2, 'spread');
    expect(stale).toEqual<Fenced>({ kind: 'fenced', segment: 1, token: 2, fence: 3 });
    expect(await segments(p)).toEqual([
      { idx: 0, stock: 1, fence: 0 },
      { idx: 1, stock: 1, fence: 3 },
    ]);
    expect(await auditProduct(p)).toMatchObject({ orders: 1, remaining: 2 });
    const fresh = await repo.sellFromSegments(p, [0, 1], [5, 6], 2, 'spread');
    expect(fresh).toMatchObject({ quantity: 2, allocations: [{ segment: 0 }, { segment: 1 }] });
    expect(await segments(p)).toEqual([
      { idx: 0, stock: 0, fence: 5 },
      { idx: 1, stock: 0, fence: 6 },
    ]);
  });

  it('should let writes that take no Redis lock (units back, restock, rebalance) change the stock and keep the fence', async () => {
    const p = await product([5, 5]);
    await repo.sellFromSegment(p, 0, 12, 1, 'u');
    await withDb(async (c) => {
      await c.query('UPDATE stock_segments SET stock = stock + 3 WHERE product_id = $1', [p]);
      await c.query(
        `INSERT INTO stock_segments (product_id, idx, stock) VALUES ($1, 0, 2), ($1, 1, 2)
         ON CONFLICT (product_id, idx) DO UPDATE SET stock = EXCLUDED.stock`,
        [p],
      );
    });
    expect(await segments(p)).toEqual([
      { idx: 0, stock: 2, fence: 12 },
      { idx: 1, stock: 2, fence: 0 },
    ]);
  });

  it('should refuse a stale token in PostgreSQL whoever writes it, not only the service', async () => {
    const p = await product([5]);
    await repo.sellFromSegment(p, 0, 3, 1, 'u');
    await expect(
      withDb((c) => c.query('UPDATE stock_segments SET fence = 2 WHERE product_id = $1', [p])),
    ).rejects.toMatchObject({ code: 'FENCE', detail: '3' });
  });
});

describe('fencing tokens: the counter in Redis', () => {
  let redis: Redis;
  beforeAll(() => {
    redis = new Redis(testUrls().redisUrl);
    defineScripts(redis);
  });
  afterAll(() => redis.disconnect());
  beforeEach(() => redis.flushall());
  const key = lockKeys.segmentFence(7, 3);

  it("should raise a counter that fell behind PostgreSQL's fence, so the next take draws a token above it", async () => {
    await redis.set(key, '2');
    expect(await runScript(redis, 'raiseFence', [key], [40])).toEqual({ kind: 'raised', counter: 40 });
    expect(await redis.incr(key)).toBe(41);
  });

  it('should raise a counter lost with its Redis (absent) to the fence', async () => {
    expect(await runScript(redis, 'raiseFence', [key], [9])).toEqual({ kind: 'raised', counter: 9 });
    expect(await redis.get(key)).toBe('9');
  });

  it('should never lower a counter that counted past the fence meanwhile', async () => {
    await redis.set(key, '50');
    expect(await runScript(redis, 'raiseFence', [key], [40])).toEqual({ kind: 'raised', counter: 50 });
    expect(await redis.get(key)).toBe('50');
  });

  it("should keep a segment's counter in its lock's hash slot, for a Redis Cluster", () => {
    expect(key).toBe(`fence:{${lockKeys.segment(7, 3)}}`);
  });
});
