// Fault: PostgreSQL is crashed (immediate shutdown, as `pg_ctl -m immediate`: a commit may land
// while its reply is lost) and frozen (SIGSTOP: statements hang past the client's timeout) again
// and again under load from two service processes. I7: every answer is the truth. A client told
// 503 BUSY or UNAVAILABLE has no order; a 201 has its order; 503 OUTCOME_UNKNOWN may be either,
// and retrying the same request tells which (201, or 409 ALREADY_ORDERED naming the order).
import { join } from 'node:path';
import { createProduct, ServiceProcess, startedTogether } from '../support/service';
import {
  audit,
  crashAndFreezeCycles,
  brief,
  expectNothingHappenedOn503,
  FaultPostgres,
  FaultRedis,
  loadUntilStopped,
  placeOrder,
  scratchDir,
  startFaultService,
  stopAll,
  withPg,
} from './support';

const DB_TIMEOUT_MS = 800;
const LOCK_WAIT_MS = 400;
const CYCLES = 8;
/**
 * The lock wait, a statement that meets the client-side query timeout (DB_TIMEOUT_MS + 1 s), then
 * settling its outcome (DB_TIMEOUT_MS), plus slack for a busy 2-core machine.
 */
const REPLY_BOUND_MS = LOCK_WAIT_MS + DB_TIMEOUT_MS + 1000 + DB_TIMEOUT_MS + 1500;

describe('Answers that are the truth while PostgreSQL crashes and freezes under load', () => {
  const scratch = scratchDir('pg-truth');
  let pg: FaultPostgres;
  let redis: FaultRedis;
  let a: ServiceProcess;
  let b: ServiceProcess;

  beforeAll(async () => {
    [pg, redis] = await Promise.all([FaultPostgres.start(join(scratch.dir, 'pg')), FaultRedis.start()]);
    const env = { DB_TIMEOUT_MS: String(DB_TIMEOUT_MS), LOCK_WAIT_MS: String(LOCK_WAIT_MS), LOG_LEVEL: 'error' };
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

  it(`should never answer BUSY or UNAVAILABLE for an order that exists, over ${CYCLES} crashes and freezes`, async () => {
    const product = await createProduct(a.url, { stock: 1_000_000, segments: 16 });
    const load = loadUntilStopped({
      concurrency: 24,
      productId: product.id,
      prefix: 't',
      pick: (i) => (i % 2 === 0 ? a.url : b.url),
      pauseMs: 1,
    });
    const createdSince = (from: number) => load.outcomes.filter((o) => o.status === 201 && o.sentAt >= from).length;

    await crashAndFreezeCycles(pg, {
      cycles: CYCLES,
      freezeMs: DB_TIMEOUT_MS + 700,
      what: 'orders flowing',
      progress: createdSince,
    });
    const outcomes = await load.stop();

    expect(outcomes.filter((o) => o.status === 0 || o.doneAt - o.sentAt > REPLY_BOUND_MS).map(brief)).toEqual([]);
    expect(outcomes.filter((o) => o.status !== 201 && o.status !== 503).map(brief)).toEqual([]);
    const codes503 = ['BUSY', 'UNAVAILABLE', 'OUTCOME_UNKNOWN'];
    expect(
      outcomes
        .filter((o) => o.status === 503 && (!codes503.includes(o.code as string) || o.retryAfter !== '1'))
        .map(brief),
    ).toEqual([]);
    // The faults were felt: many requests failed, and some were caught with their write in flight.
    expect(outcomes.filter((o) => o.status === 503).length).toBeGreaterThanOrEqual(CYCLES * 5);

    const books = await audit(pg.url, product.id);
    expect(books.negativeSegments).toBe(0);
    expect(books.ordered + books.remaining).toBe(books.totalStock);
    expect(books.duplicateUsers).toBe(0);
    const unknown = expectNothingHappenedOn503(books, outcomes);

    // Retrying the same request settles an unknown outcome: it names the order if there is one.
    const orderIdOf = (userId: string) =>
      withPg(pg.url, async (db) => {
        const r = await db.query('SELECT id::text AS id FROM orders WHERE product_id = $1 AND user_id = $2', [
          product.id,
          userId,
        ]);
        return r.rows.length === 0 ? undefined : Number(r.rows[0].id);
      });
    for (const userId of unknown) {
      const existing = await orderIdOf(userId);
      const retry = await placeOrder(a.url, userId, product.id);
      if (existing !== undefined) {
        expect({ status: retry.status, code: retry.code, orderId: JSON.parse(retry.text).orderId }).toEqual({
          status: 409,
          code: 'ALREADY_ORDERED',
          orderId: existing,
        });
      } else {
        expect(brief(retry)).toBe(brief({ ...retry, status: 201, code: undefined }));
      }
    }
    const after = await audit(pg.url, product.id);
    expect(after.ordered + after.remaining).toBe(after.totalStock);
    expect(after.duplicateUsers).toBe(0);
  }, 300_000);
});
