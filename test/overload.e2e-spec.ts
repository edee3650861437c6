// Overload (docs/overload.md) across two service processes on the real PostgreSQL and Redis, with
// one process lagging on purpose: it is stopped (SIGSTOP) for longer than SOLD_OUT_STALE_MS again
// and again, as a process on an outgrown machine stalls. While a storm of buyers orders a sold-out
// product from it, every refusal is still answered from memory (no PostgreSQL statement but the
// board's polls, no Redis command), a unit returned on the other process is sold within the
// staleness bound, and the calls it sheds are answered 503 OVERLOADED with Retry-After and change
// nothing.
import { metric } from './faults/support';
import { callsBetween, redisCommandCount, resetState, statementCalls, withDb } from './support/database';
import {
  createProduct,
  pooled,
  Reply,
  request,
  ServiceProcess,
  shop,
  startedTogether,
  startService,
} from './support/service';
import { sleep, waitFor } from './support/wait';

const STALE_MS = 100;
/** Periodic work of a process, whatever the load: the board's poll and the waiting-room clock (tagged statements). */
const PERIODIC = ['sold-out board poll', 'waiting-room clock'];

/** Stops and resumes a process in bursts (stopped longer than the staleness bound) until told to end. */
function lagInBursts(
  pid: number,
  stopMs = 3 * STALE_MS,
  runMs = STALE_MS,
): { bursts: () => number; end: () => Promise<void> } {
  let running = true;
  let bursts = 0;
  const loop = (async () => {
    while (running) {
      process.kill(pid, 'SIGSTOP');
      bursts++;
      await sleep(stopMs);
      process.kill(pid, 'SIGCONT');
      await sleep(runMs);
    }
  })();
  return {
    bursts: () => bursts,
    end: async () => {
      running = false;
      await loop;
      process.kill(pid, 'SIGCONT');
    },
  };
}

async function liveOrders(productId: number): Promise<number> {
  return withDb(async (db) => {
    const { rows } = await db.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM orders WHERE product_id = $1 AND status IN ('reserved', 'paid')`,
      [productId],
    );
    return Number(rows[0].n);
  });
}

const order = (base: string, userId: string, productId: number) =>
  request(base, 'POST', '/orders', { userId, productId });

describe('overload: a lagging process keeps its "no" free and sheds the rest', () => {
  let lagging: ServiceProcess;
  let steady: ServiceProcess;

  beforeAll(async () => {
    await resetState();
    // No sweep and no operator-page reports: every statement and command counted is a refusal's
    // or the board's poll. Joins are shed from 20 ms of mean event-loop delay, new orders from
    // 40 ms; the rest (pay, cancel, polls) at a level no burst here reaches.
    const env = { EXPIRY_SWEEP_MS: '0', LIVE_STATS_MS: '0', SOLD_OUT_STALE_MS: String(STALE_MS) };
    [lagging, steady] = await startedTogether([
      startService({ ...env, SHED_LAG_MS: '20,40,60000', SHED_SAMPLE_MS: '50' }),
      startService(env),
    ]);
  });
  afterAll(async () => {
    await Promise.all([lagging?.stop(), steady?.stop()]);
  });

  it('should refuse a sold-out product from memory while stalled past the staleness bound, and sell a returned unit within it', async () => {
    const product = await createProduct(steady.url, { stock: 10, segments: 2 });
    const sold = await pooled(
      Array.from({ length: 10 }, (_, i) => () => order(steady.url, `holder-${i}`, product.id)),
      5,
    );
    expect(sold.map((r) => r.status)).toEqual(sold.map(() => 201));
    // The lagging process learns the product is sold out from one refusal on its order path.
    let n = 0;
    await waitFor(`${lagging.url} to refuse product ${product.id} from memory`, async () => {
      const r = await order(lagging.url, `learner-${n++}`, product.id);
      expect(r.status).toBe(410);
      return (await metric(lagging.url, 'flashsale_in_process_refusals_total')) > 0;
    });

    const statementsBefore = await statementCalls();
    const commandsBefore = await redisCommandCount();
    const lag = lagInBursts(lagging.pid);
    const storm = await pooled(
      Array.from({ length: 1500 }, (_, i) => () => order(lagging.url, `crowd-${i}`, product.id)),
      50,
    );
    const statements = callsBetween(statementsBefore, await statementCalls());
    const commands = (await redisCommandCount()) - commandsBefore;

    // A unit comes back on the other process while the lagging one still stalls.
    const cancelled = await request(
      steady.url,
      'POST',
      `/orders/${(sold[0].body as { id: number }).id}/cancel`,
      {
        userId: 'holder-0',
      },
      shop,
    );
    expect(cancelled.status).toBe(200);
    await sleep(STALE_MS);
    // From here on no process may refuse it: a buyer is sold the unit, or told to retry (shed).
    const afterReturn: Reply[] = [];
    await waitFor('the returned unit to be sold on the lagging process', async () => {
      const r = await order(lagging.url, `returner-${afterReturn.length}`, product.id);
      afterReturn.push(r);
      return r.status === 201;
    });
    await lag.end();

    expect(storm.filter((r) => r.status !== 410).map((r) => [r.status, r.body])).toEqual([]);
    const others = Object.fromEntries(
      Object.entries(statements).filter(([query]) => !PERIODIC.some((tag) => query.includes(tag))),
    );
    expect(others).toEqual({});
    expect(commands).toBe(0);
    expect(lag.bursts()).toBeGreaterThan(1);
    expect(afterReturn.filter((r) => r.status !== 201 && !(r.status === 503 && r.body.code === 'OVERLOADED'))).toEqual(
      [],
    );
    expect(await liveOrders(product.id)).toBe(10);
  });

  it('should shed joins and new orders with 503 OVERLOADED and Retry-After while stalled, and change nothing for them', async () => {
    const plain = await createProduct(steady.url, { stock: 5000, segments: 8 });
    const room = await createProduct(steady.url, { stock: 5000, segments: 8, waitingRoom: true });
    const shedBefore = await metric(lagging.url, 'flashsale_shed_total');
    const lag = lagInBursts(lagging.pid);
    const calls = await pooled(
      Array.from({ length: 600 }, (_, i) => async (): Promise<[string, Reply]> => {
        const userId = `shed-${i}`;
        return i % 2 === 0
          ? [userId, await order(lagging.url, userId, plain.id)]
          : [userId, await request(lagging.url, 'POST', `/products/${room.id}/queue`, { userId })];
      }),
      50,
    );
    await lag.end();

    const shed = calls.filter(([, r]) => r.status === 503);
    expect(shed.length).toBeGreaterThan(0);
    for (const [, r] of shed) {
      expect(r.body).toMatchObject({ statusCode: 503, code: 'OVERLOADED' });
      expect(Number(r.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    }
    expect(calls.filter(([, r]) => ![200, 201, 503].includes(r.status)).map(([u, r]) => [u, r.status, r.body])).toEqual(
      [],
    );
    const shedUsers = shed.map(([u]) => u);
    const changed = await withDb(async (db) => {
      const orders = await db.query(`SELECT user_id FROM orders WHERE user_id = ANY($1::text[])`, [shedUsers]);
      const tickets = await db.query(`SELECT user_id FROM queue_tickets WHERE user_id = ANY($1::text[])`, [shedUsers]);
      return [...orders.rows, ...tickets.rows];
    });
    expect(changed).toEqual([]);
    expect((await metric(lagging.url, 'flashsale_shed_total')) - shedBefore).toBe(shed.length);
  });

  it('should shed new orders beyond SHED_ORDERS_IN_FLIGHT on the order path at once, and change nothing for them', async () => {
    // One segment and 300 ms of work inside its lock: orders queue on the order path, not on the event loop.
    const bounded = await startService({ SHED_ORDERS_IN_FLIGHT: '4', ORDER_HOLD_MS: '300', ORDER_BATCH_MAX: '1' });
    try {
      const product = await createProduct(bounded.url, { stock: 100, segments: 1 });
      const calls = await pooled(
        Array.from({ length: 40 }, (_, i) => async (): Promise<[string, Reply]> => {
          const userId = `queued-${i}`;
          return [userId, await order(bounded.url, userId, product.id)];
        }),
        40,
      );
      const shed = calls.filter(([, r]) => r.status === 503 && r.body.code === 'OVERLOADED');
      const sold = calls.filter(([, r]) => r.status === 201);
      expect(shed.length).toBeGreaterThan(0);
      expect(sold.length).toBeGreaterThan(0);
      expect(calls.filter(([, r]) => r.status !== 201 && r.status !== 503).map(([u, r]) => [u, r.body])).toEqual([]);
      for (const [, r] of shed) expect(Number(r.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      const shedUsers = shed.map(([u]) => u);
      const ordersOfShed = await withDb(
        async (db) => (await db.query(`SELECT user_id FROM orders WHERE user_id = ANY($1::text[])`, [shedUsers])).rows,
      );
      expect(ordersOfShed).toEqual([]);
      expect(await liveOrders(product.id)).toBe(sold.length);
      // Once the queue has drained, orders are taken again.
      expect((await order(bounded.url, 'after-the-queue', product.id)).status).toBe(201);
    } finally {
      await bounded.stop();
    }
  });
});
