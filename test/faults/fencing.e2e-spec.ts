// Fault: a segment lock holder pauses after taking its lock and before its write reaches
// PostgreSQL (here a proxy holds its UPDATE back for five lock TTLs). Its lock expires; a second
// buyer on another process takes it with a newer fencing token and sells. The segment still holds
// a unit, so the conditional write alone would let the paused holder's late write through: the
// fence is what refuses it. The paused holder's order then takes the lock again and sells the last
// unit with a token newer still; the refusal is counted and said in the log.
// (test/faults/lock-expiry.e2e-spec.ts is the same stall on a segment of one unit, where the
// conditional write refuses the late write by itself.)
import { join } from 'node:path';
import { lockKeys } from '../../src/infrastructure/redis-keys';
import { createProduct, ServiceProcess } from '../support/service';
import {
  expectPromisesKept,
  FaultPostgres,
  FaultRedis,
  metric,
  placeOrder,
  scratchDir,
  StallingProxy,
  startFaultService,
  stopAll,
  withPg,
} from './support';
import { waitFor } from '../support/wait';

const LOCK_TTL_MS = 300;
const STALL_MS = 1500; // five TTLs
const TAKE_STATEMENT = 'UPDATE stock_segments';

describe('fencing: a paused lock holder outlived by a newer holder', () => {
  const scratch = scratchDir('fencing');
  let pg: FaultPostgres;
  let redis: FaultRedis;
  let proxy: StallingProxy;
  let paused: ServiceProcess;
  let prompt: ServiceProcess;

  beforeAll(async () => {
    [pg, redis] = await Promise.all([FaultPostgres.start(join(scratch.dir, 'pg')), FaultRedis.start()]);
    proxy = await StallingProxy.start(pg.port);
    const env = { LOCK_TTL_MS: String(LOCK_TTL_MS), LOCK_EXTEND: 'false', LOCK_WAIT_MS: '5000', LOG_LEVEL: 'warn' };
    [paused, prompt] = await Promise.all([
      startFaultService(pg, redis, { ...env, DATABASE_URL: pg.urlAt(proxy.port) }),
      startFaultService(pg, redis, env),
    ]);
  });
  afterAll(async () => {
    await stopAll(
      () => paused?.stop(),
      () => prompt?.stop(),
      () => proxy?.stop(),
      () => redis?.stop(),
      () => pg?.stop(),
    );
    scratch.cleanup();
  });

  /** The product's one segment as PostgreSQL has it. */
  const segment = (productId: number) =>
    withPg(
      pg.url,
      async (db) =>
        (await db.query('SELECT stock::int, fence::int FROM stock_segments WHERE product_id = $1', [productId]))
          .rows[0] as { stock: number; fence: number },
    );

  it("should refuse the paused holder's late write for its stale token while the segment still holds units, then sell it under a newer token", async () => {
    const product = await createProduct(prompt.url, { stock: 2, segments: 1 });
    const fenceKey = lockKeys.segmentFence(product.id, 0);
    const stall = proxy.stallNext(TAKE_STATEMENT, STALL_MS);
    const first = placeOrder(paused.url, 'paused-buyer', product.id);
    const stalledAt = await stall;
    // The paused holder drew the first token; the second buyer waits out its lock and draws a newer one.
    const drawnByPaused = Number(await redis.with((r) => r.get(fenceKey)));
    const second = await placeOrder(prompt.url, 'prompt-buyer', product.id);
    expect(second).toMatchObject({ status: 201 });
    expect(second.doneAt).toBeLessThan(stalledAt + STALL_MS);
    const afterSecond = await segment(product.id);
    expect(afterSecond.stock).toBe(1);
    expect(afterSecond.fence).toBeGreaterThan(drawnByPaused);

    // The late write met the newer fence: refused, nothing written; the order went on and sold the last unit.
    const late = await first;
    expect(late).toMatchObject({ status: 201 });
    expect(late.doneAt).toBeGreaterThanOrEqual(stalledAt + STALL_MS);
    expect(await metric(paused.url, 'flashsale_fenced_writes_total')).toBe(1);
    expect(await metric(prompt.url, 'flashsale_fenced_writes_total')).toBe(0);
    const said = `stale write refused: segment 0 of product ${product.id}, token ${drawnByPaused} below fence ${afterSecond.fence}`;
    await waitFor(`"${said}" in the paused process's log`, () => paused.output().includes(said));
    const books = await expectPromisesKept(pg.url, product.id, [late, second], { failedMeansNoOrder: true });
    expect(books).toMatchObject({ totalStock: 2, ordered: 2, remaining: 0, orders: 2, negativeSegments: 0 });
    const end = await segment(product.id);
    expect(end.stock).toBe(0);
    expect(end.fence).toBeGreaterThan(afterSecond.fence);
    expect(Number(await redis.with((r) => r.get(fenceKey)))).toBeGreaterThanOrEqual(end.fence);
  });
});
