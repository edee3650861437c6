// A sale on a Redis Cluster of 3 masters (REDIS_CLUSTER_NODES) across two service processes: the
// invariants of docs/design.md (I1-I7) through a sell-out storm with duplicate bursts and a
// rebalance, then payments, cancels, expiries and a resale of the returned units, each phase
// checked from PostgreSQL; and evidence from Redis itself that every master served segment-lock
// traffic (the segment locks hash whole, so one product's segments spread over the masters).
import { Client } from 'pg';
import { brief, expectPromisesKept, metricIn, Outcome, placeOrder, tally } from '../faults/support';
import { sleep, waitFor } from '../support/wait';
import { auditProduct, countByStatus, expectStockBalanced } from '../support/database';
import { admin, createProduct, pooled, request, testUrls, shop } from '../support/service';
import {
  ClusterSale,
  hintMaster,
  onNode,
  scriptCalls,
  segmentMasters,
  startClusterSale,
  watchSegmentLocks,
} from './support';

const CONCURRENCY = 64;
const EXPIRY_SWEEP_MS = 100;
const LOCK_ATTEMPTS = 'flashsale_segment_lock_attempts_total';

describe('a sale on a 3-master Redis Cluster across two service processes', () => {
  let sale: ClusterSale;
  let db: Client;

  beforeAll(async () => {
    sale = await startClusterSale({ EXPIRY_SWEEP_MS: String(EXPIRY_SWEEP_MS), LOG_LEVEL: 'error' });
    db = new Client({ connectionString: testUrls().databaseUrl });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await sale?.stop();
  });

  /** I3 from the clients' clocks: a 201 sent after a SOLD_OUT came back proves units remained then. */
  function falseSoldOuts(outcomes: Outcome[]): string[] {
    const lastCreatedSend = Math.max(-Infinity, ...outcomes.filter((o) => o.status === 201).map((o) => o.sentAt));
    return outcomes.filter((o) => o.status === 410 && o.doneAt < lastCreatedSend).map(brief);
  }

  /** Segment-lock attempts the two services counted, per master of the cluster (in node order). */
  async function lockAttemptsByMaster(): Promise<Array<{ acquired: number; unreachable: number }>> {
    const texts = await Promise.all([sale.a, sale.b].map(async (s) => (await request(s.url, 'GET', '/metrics')).text));
    const count = (master: string, outcome: string) =>
      texts.reduce((n, t) => n + metricIn(t, LOCK_ATTEMPTS, { master, outcome }), 0);
    return sale.cluster.nodes.map((n) => ({
      acquired: count(`127.0.0.1:${n.port}`, 'acquired'),
      unreachable: count(`127.0.0.1:${n.port}`, 'unreachable'),
    }));
  }

  async function statusOf(ids: number[]): Promise<Map<number, string>> {
    const { rows } = await db.query('SELECT id::text, status FROM orders WHERE id = ANY($1::bigint[])', [ids]);
    return new Map(rows.map((r) => [Number(r.id), r.status as string]));
  }

  it('should keep I1-I7 through a sell-out storm with duplicate bursts and a rebalance, then pays, cancels, expiries and a resale of the returned units', async () => {
    const STOCK = 1000;
    const BUYERS = 1500;
    // Far longer than the storm at any speed: the unpaid reservations are made due in phase 3.
    const product = await createProduct(sale.a.url, { stock: STOCK, segments: 20, paymentTimeoutS: 3600 });
    const masters = await segmentMasters(sale.cluster, product.id, 20);
    // The segments really are spread: every master holds some of this product's locks.
    expect(new Set(masters).size).toBe(3);

    // Phase 1: 1500 buyers for 1000 units; every tenth buyer sends three orders at once (one to
    // the other process) instead of one; a rebalance to 12 segments runs in the middle.
    let answered = 0;
    const tasks = Array.from({ length: BUYERS }, (_, i) => async () => {
      const userId = `storm-${i}`;
      const sent =
        i % 10 !== 0
          ? [await placeOrder(sale.pick(i), userId, product.id)]
          : await Promise.all([
              placeOrder(sale.pick(i), userId, product.id),
              placeOrder(sale.pick(i + 1), userId, product.id),
              placeOrder(sale.pick(i), userId, product.id),
            ]);
      answered++;
      return sent;
    });
    const rebalance = (async () => {
      await waitFor('the storm under way', () => answered >= 300, 60_000);
      return request(sale.b.url, 'POST', `/admin/products/${product.id}/rebalance`, { segments: 12 }, admin);
    })();
    const storm = (await pooled(tasks, CONCURRENCY)).flat();
    const rebalanced = await rebalance;

    expect(storm.filter((o) => o.status === 0 || o.status >= 500).map(brief)).toEqual([]);
    expect(storm.filter((o) => ![201, 409, 410].includes(o.status)).map(brief)).toEqual([]);
    expect(rebalanced.status).toBe(200);
    expect(rebalanced.body.after.segmentCount).toBe(12);
    expect(rebalanced.body.after.stock).toBe(rebalanced.body.before.stock);
    expect(rebalanced.body.before.stock + rebalanced.body.before.sold).toBe(STOCK);
    const created = storm.filter((o) => o.status === 201);
    // I2: nobody was told 201 twice; I7: every 201 is an order and every order of this product was told 201.
    const books = await expectPromisesKept(testUrls().databaseUrl, product.id, storm);
    expect(books.orderIds.size).toBe(created.length);
    // Demand beat the stock: all of it sold, and no more.
    expect(created.length).toBe(STOCK);
    expect(await expectStockBalanced(product.id, STOCK)).toMatchObject({
      remaining: 0,
      ordered: STOCK,
      orders: STOCK,
    });
    expect(falseSoldOuts(storm)).toEqual([]);
    // A duplicate is refused as such, never sold twice.
    for (const o of storm.filter((x) => x.status === 409))
      expect(['ALREADY_ORDERED', 'ORDER_IN_PROGRESS']).toContain(o.code);

    // Phase 2: 30 % cancel, 30 % pay, alternating processes; the rest are left to expire.
    const orders = created.map((o) => ({ id: o.orderId as number, userId: o.userId }));
    const toCancel = orders.filter((_, i) => i % 10 < 3);
    const toPay = orders.filter((_, i) => i % 10 >= 3 && i % 10 < 6);
    const calls = await pooled(
      [
        ...toCancel.map((o, i) => async () => ({
          kind: 'cancel',
          o,
          r: await request(sale.pick(i), 'POST', `/orders/${o.id}/cancel`, { userId: o.userId }, shop),
        })),
        ...toPay.map((o, i) => async () => ({
          kind: 'pay',
          o,
          r: await request(sale.pick(i + 1), 'POST', `/orders/${o.id}/pay`, { userId: o.userId }, shop),
        })),
      ],
      CONCURRENCY,
    );
    // Every call won: no reservation is due yet.
    const wrong = calls.filter(
      ({ kind, r }) => !(r.status === 200 && r.body.status === (kind === 'pay' ? 'paid' : 'cancelled')),
    );
    expect(wrong.map(({ kind, o, r }) => `${kind} ${o.id}: ${r.status} ${r.text}`)).toEqual([]);
    const paid = new Set(calls.filter((c) => c.kind === 'pay' && c.r.status === 200).map((c) => c.o.id));
    const cancelled = new Set(calls.filter((c) => c.kind === 'cancel' && c.r.status === 200).map((c) => c.o.id));
    await expectStockBalanced(product.id, STOCK);

    // Phase 3: the rest fall due now (their deadline set in PostgreSQL, whose clock the sweeps
    // compare with), and the sweeps of both processes expire them; I6: every unit back exactly once.
    const due = await db.query(`UPDATE orders SET expires_at = now() WHERE product_id = $1 AND status = 'reserved'`, [
      product.id,
    ]);
    expect(due.rowCount).toBe(orders.length - paid.size - cancelled.size);
    await waitFor(
      'every unpaid reservation to expire',
      async () => ((await countByStatus(db, product.id)).reserved ?? 0) === 0,
      30_000,
      100,
    );
    const final = await statusOf(orders.map((o) => o.id));
    // I7: paid iff a pay said 200, cancelled iff a cancel said 200, everything else expired.
    const misfiled = orders.filter(
      (o) => final.get(o.id) !== (paid.has(o.id) ? 'paid' : cancelled.has(o.id) ? 'cancelled' : 'expired'),
    );
    expect(misfiled.map((o) => `${o.id}: ${final.get(o.id)}`)).toEqual([]);
    const afterReturns = await expectStockBalanced(product.id, STOCK);
    expect(afterReturns).toMatchObject({ ordered: paid.size, orders: paid.size, remaining: STOCK - paid.size });

    // Phase 4: the returned units sell again, exactly, to new buyers and to users whose orders
    // closed; users who paid are refused as ALREADY_ORDERED; then SOLD_OUT, with none false.
    const patched = await request(
      sale.a.url,
      'PATCH',
      `/admin/products/${product.id}`,
      { paymentTimeoutS: 900 },
      admin,
    );
    expect(patched.status).toBe(200);
    const remaining = afterReturns.remaining;
    const returning = orders.filter((o) => !paid.has(o.id)).map((o) => o.userId);
    const newcomers = Array.from({ length: remaining + 200 - returning.length }, (_, i) => `late-${i}`);
    const payers = orders.filter((o) => paid.has(o.id)).slice(0, 50);
    const resale = await pooled(
      [...returning, ...newcomers].map((u, i) => () => placeOrder(sale.pick(i), u, product.id)),
      CONCURRENCY,
    );
    const payersAgain = await pooled(
      payers.map((o, i) => () => placeOrder(sale.pick(i), o.userId, product.id)),
      CONCURRENCY,
    );
    expect(tally(payersAgain)).toEqual({ '409 ALREADY_ORDERED': payers.length });
    expect(tally(resale)).toEqual({ '201': remaining, '410 SOLD_OUT': resale.length - remaining });
    expect(falseSoldOuts(resale)).toEqual([]);
    await expectPromisesKept(testUrls().databaseUrl, product.id, resale);
    expect(await expectStockBalanced(product.id, STOCK)).toMatchObject({
      remaining: 0,
      ordered: STOCK,
      orders: paid.size + remaining,
    });
    // The hint scripts ran on the cluster: the sold-out flag is on the master of the product's slot.
    expect(
      await onNode((await hintMaster(sale.cluster, product.id)).url, (r) => r.exists(`hint:soldout:{${product.id}}`)),
    ).toBe(1);
  });

  it('should spread the segment-lock traffic over every master: each takes and releases the locks of the segments whose slots it serves', async () => {
    const SEGMENTS = 24;
    const product = await createProduct(sale.a.url, { stock: 3000, segments: SEGMENTS });
    const masters = await segmentMasters(sale.cluster, product.id, SEGMENTS);
    const owned = new Map(sale.cluster.nodes.map((n) => [n, masters.filter((m) => m === n).length]));
    expect([...owned.values()].every((n) => n > 0)).toBe(true);

    const watch = await watchSegmentLocks(sale.cluster, product.id);
    const scriptsBefore = await Promise.all(sale.cluster.nodes.map(scriptCalls));
    const attemptsBefore = await lockAttemptsByMaster();
    const outcomes = await pooled(
      Array.from({ length: 600 }, (_, i) => () => placeOrder(sale.pick(i), `spread-${i}`, product.id)),
      CONCURRENCY,
    );
    const scriptsAfter = await Promise.all(sale.cluster.nodes.map(scriptCalls));
    const attemptsAfter = await lockAttemptsByMaster();
    // The last notifications are still on their way when the last reply is in (later on a loaded
    // machine): wait until every master has reported a lock write and a release.
    await waitFor(
      'every master to report lock writes and releases',
      () =>
        sale.cluster.nodes.every((n) => {
          const c = watch.counts().get(n);
          return c !== undefined && c.set > 0 && c.del > 0;
        }),
      30_000,
    );
    await sleep(200); // a last notification may still be on its way
    watch.stop();

    expect(tally(outcomes)).toEqual({ '201': 600 });
    const counts = watch.counts();
    const acquired = sale.cluster.nodes.map((_, i) => attemptsAfter[i].acquired - attemptsBefore[i].acquired);
    const takes = acquired.reduce((n, a) => n + a, 0);
    // Every order took a lock or rode in a hold of at most ORDER_BATCH_MAX (default 32).
    expect(takes).toBeGreaterThanOrEqual(600 / 32);
    const report = sale.cluster.nodes.map((n, i) => ({
      port: n.port,
      segmentsOwned: owned.get(n),
      locksAcquired: acquired[i],
      unreachable: attemptsAfter[i].unreachable - attemptsBefore[i].unreachable,
      lockSetsSeen: counts.get(n)?.set,
      lockDelsSeen: counts.get(n)?.del,
      scriptCalls: scriptsAfter[i] - scriptsBefore[i],
    }));
    for (const [i, node] of sale.cluster.nodes.entries()) {
      const c = counts.get(node) as { set: number; del: number; keys: Set<string> };
      const fair = (owned.get(node) as number) / SEGMENTS;
      // A share of the lock takes in line with the segments it serves (at least half the fair
      // share), counted by the services: keyspace notifications are fire-and-forget, so the
      // counts seen from Redis are only a floor (a CI run saw 20 sets from a master that ran 237
      // scripts, where other runs see one set per 5 to 7 scripts).
      expect({ ...report[i], enough: acquired[i] >= 0.5 * fair * takes }).toEqual({ ...report[i], enough: true });
      // Redis itself reports lock writes, takes and releases, on every master.
      expect(c.set > 0 && c.del > 0).toBe(true);
      // Only keys of its own segments: the locks went to the master that owns their slot.
      const own = new Set(masters.flatMap((m, idx) => (m === node ? [`lock:stock:${product.id}:${idx}`] : [])));
      expect([...c.keys].filter((k) => !own.has(k))).toEqual([]);
      // The lock scripts (Redlock's EVALSHA/EVAL) ran there: at least one call per lock write.
      expect(scriptsAfter[i] - scriptsBefore[i]).toBeGreaterThanOrEqual(c.set + c.del);
    }
    expect(await auditProduct(product.id)).toEqual({
      totalStock: 3000,
      remaining: 2400,
      ordered: 600,
      orders: 600,
      negativeSegments: 0,
      duplicateUsers: 0,
    });
  });
});
