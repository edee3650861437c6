// Fault: Redis loses everything in the middle of a sale (FLUSHALL, then a restart of a Redis
// without persistence): every lock and hint is gone while orders hold them. PostgreSQL must still
// refuse to oversell or to give a user a second order, and the sold-out product must still be
// refused without any hint.
import { join } from 'node:path';
import { lockKeys } from '../../src/infrastructure/redis-keys';
import { createProduct, pooled, ServiceProcess, startedTogether } from '../support/service';
import {
  audit,
  brief,
  expectPromisesKept,
  FaultPostgres,
  FaultRedis,
  metric,
  Outcome,
  placeOrder,
  scratchDir,
  startFaultService,
  stopAll,
  withPg,
} from './support';
import { sleep, waitFor } from '../support/wait';

describe('Redis flushed and restarted empty during a sale, across two service processes', () => {
  const scratch = scratchDir('redis-flush');
  let pg: FaultPostgres;
  let redis: FaultRedis;
  let a: ServiceProcess;
  let b: ServiceProcess;

  beforeAll(async () => {
    [pg, redis] = await Promise.all([FaultPostgres.start(join(scratch.dir, 'pg')), FaultRedis.start()]);
    // Each sale holds its segment 200 ms, so orders are in flight when Redis forgets their locks.
    const env = { ORDER_HOLD_MS: '200', LOG_LEVEL: 'error' };
    [a, b] = await startedTogether([startFaultService(pg, redis, env), startFaultService(pg, redis, env)]);
  });
  afterAll(async () => {
    await stopAll(
      () => a?.stop(),
      () => b?.stop(),
      () => redis?.stop(),
      () => pg?.stop(),
    );
    scratch.cleanup();
  });

  it('should refuse with ALREADY_ORDERED a duplicate that got past a user lock lost in a FLUSHALL', async () => {
    const product = await createProduct(a.url, { stock: 10, segments: 2 });
    const first = placeOrder(a.url, 'twice', product.id);
    // The first order holds the user lock; Redis forgets it.
    await redis.with(async (r) => {
      await waitFor('the user lock', async () => (await r.exists(lockKeys.user('twice'))) === 1, 5000, 2);
      await r.flushall();
    });
    const second = await placeOrder(b.url, 'twice', product.id);
    const replies = [await first, second];

    // The two were in flight together (without the flush the second would be ORDER_IN_PROGRESS)...
    expect(second.sentAt).toBeLessThan(replies[0].doneAt);
    // ...and the database let exactly one through.
    expect(replies.map((o) => `${o.status} ${o.code ?? ''}`.trim()).sort()).toEqual(['201', '409 ALREADY_ORDERED']);
    const books = await expectPromisesKept(pg.url, product.id, replies);
    expect(books).toMatchObject({ orders: 1, ordered: 1, remaining: 9 });
  });

  it('should sell exactly the stock, once per user, through a FLUSHALL and a restart of Redis, and rebuild the hints', async () => {
    const STOCK = 200;
    const product = await createProduct(a.url, { stock: STOCK, segments: 20 });
    const sold = () =>
      withPg(
        pg.url,
        async (db) =>
          (await db.query('SELECT count(*)::int AS n FROM orders WHERE product_id = $1', [product.id])).rows[0]
            .n as number,
      );
    const outcomes: Outcome[] = [];
    // Every buyer sends two orders at once (one to each process) and retries a 503 like a client
    // honouring Retry-After would, only sooner.
    const buy = async (userId: string, base: string) => {
      for (let attempt = 0; attempt < 60; attempt++) {
        const o = await placeOrder(base, userId, product.id);
        outcomes.push(o);
        if (o.status !== 503) return;
        await sleep(50);
      }
    };
    const buyers = Array.from({ length: 320 }, (_, i) => `buyer-${i}`);
    const tasks = buyers.flatMap((u) => [() => buy(u, a.url), () => buy(u, b.url)]);
    const storm = pooled(tasks, 48);

    await waitFor('a quarter of the stock sold', async () => (await sold()) >= STOCK / 4, 30_000);
    await redis.with((r) => r.flushall());
    await waitFor('more than half of the stock sold', async () => (await sold()) >= STOCK / 2 + 10, 30_000);
    await redis.stop();
    await sleep(300);
    await redis.start();
    await storm;

    // No 500s, no hangs: only 201, 409 (the user's other order), 410 and 503 along the way.
    expect(outcomes.filter((o) => ![201, 409, 410, 503].includes(o.status)).map(brief)).toEqual([]);
    expect(outcomes.some((o) => o.code === 'UNAVAILABLE')).toBe(true); // the restart was felt
    // Sold out exactly, nobody twice, every 201 persisted, nobody told "failed" holds an order.
    const books = await expectPromisesKept(pg.url, product.id, outcomes, { failedMeansNoOrder: true });
    expect(books).toMatchObject({ totalStock: STOCK, remaining: 0, ordered: STOCK, orders: STOCK });
    expect(outcomes.filter((o) => o.status === 201)).toHaveLength(STOCK);

    // Refusals need no Redis hint: after a flush each process still says no, from what its
    // sold-out board learnt from PostgreSQL (or, before that, from one authoritative read).
    await redis.with((r) => r.flushall());
    for (const [svc, userId] of [
      [a, 'late-1'],
      [b, 'late-2'],
    ] as const) {
      const refusals = await metric(svc.url, 'flashsale_in_process_refusals_total');
      await waitFor(`${userId}: a refusal from memory`, async () => {
        const late = await placeOrder(svc.url, userId, product.id);
        expect(late).toMatchObject({ status: 410, code: 'SOLD_OUT' });
        return (await metric(svc.url, 'flashsale_in_process_refusals_total')) > refusals;
      });
    }
    expect(await redis.with((r) => r.keys('lock:*'))).toEqual([]);
    expect((await audit(pg.url, product.id)).orders).toBe(STOCK);
  });
});
