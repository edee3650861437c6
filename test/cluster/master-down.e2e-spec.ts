// One master of a 3-master Redis Cluster (cluster-require-full-coverage no, no replicas) killed with
// SIGKILL while two service processes sell two products: orders whose segment lock lives on the
// dead master fall over to segments on the live ones; once those are empty the units behind the
// dead master are answered 503 UNAVAILABLE (with Retry-After), never SOLD_OUT; a product whose
// hints live on the dead master sells on without them; users whose order lock lives there order
// without it, and the partial unique index still keeps one live order each. No 500, no hang, and
// PostgreSQL shows nothing lost or oversold and every 201 stored.
import type { RedisClusterNode } from '../../harness/embedded-redis-cluster';
import { brief, expectPromisesKept, loadUntilStopped, Outcome, placeOrder, tally } from '../faults/support';
import { waitFor } from '../support/wait';
import { withDb } from '../support/database';
import { createProduct, testUrls } from '../support/service';
import { ClusterSale, hintMaster, segmentMasters, startClusterSale, userLockMaster } from './support';

const SEGMENTS = 12;
/** No answer may take longer (the Redis timeout is 1 s; the rest is a busy 2-core machine's slack). */
const REPLY_BOUND_MS = 10_000;

describe('a Redis Cluster master killed (SIGKILL) mid-sale, across two service processes', () => {
  let sale: ClusterSale;

  beforeAll(async () => {
    sale = await startClusterSale({ LOG_LEVEL: 'error' });
  });
  afterAll(async () => {
    await sale?.stop();
  });

  /** Creates products until `fits` accepts one (the slots of its keys decide where they live). */
  async function productWhere(stock: number, fits: (p: { id: number }) => Promise<boolean>): Promise<{ id: number }> {
    for (let tries = 0; tries < 20; tries++) {
      const p = await createProduct(sale.a.url, { stock, segments: SEGMENTS });
      if (await fits(p)) return p;
    }
    throw new Error('no product of 20 had its keys where this spec needs them');
  }

  it('should sell on from the live masters, answer 201/409/410 or 503 with Retry-After within the bound, and keep the books exact', async () => {
    // P1: hints on a live master, some segments on the victim; small, so its live segments run dry.
    let victim: RedisClusterNode | undefined;
    let p1Masters: RedisClusterNode[] = [];
    const p1 = await productWhere(SEGMENTS * 30, async (p) => {
      const hints = await hintMaster(sale.cluster, p.id);
      p1Masters = await segmentMasters(sale.cluster, p.id, SEGMENTS);
      victim = sale.cluster.nodes.find((n) => n !== hints && p1Masters.filter((m) => m === n).length >= 2);
      return victim !== undefined;
    });
    const dead = victim as RedisClusterNode;
    // P2: hints on the victim; large, so it never runs dry.
    const p2 = await productWhere(5000, async (p) => (await hintMaster(sale.cluster, p.id)) === dead);
    // Users whose order lock lives on the victim.
    const lockless: string[] = [];
    for (let n = 0; lockless.length < 40; n++)
      if ((await userLockMaster(sale.cluster, `twice-${n}`)) === dead) lockless.push(`twice-${n}`);

    const loads = [p1, p2].map((p) =>
      loadUntilStopped({ concurrency: 16, productId: p.id, prefix: `load-${p.id}`, pick: sale.pick }),
    );
    const created = () => loads.reduce((n, l) => n + l.outcomes.filter((o) => o.status === 201).length, 0);
    await waitFor('60 orders before the kill', () => created() >= 60, 30_000);

    const killedAt = Date.now();
    dead.kill('SIGKILL');
    // Three orders at once per lockless user, on both processes.
    const twice = (
      await Promise.all(
        lockless.map((u, i) =>
          Promise.all([
            placeOrder(sale.pick(i), u, p2.id),
            placeOrder(sale.pick(i + 1), u, p2.id),
            placeOrder(sale.pick(i), u, p2.id),
          ]),
        ),
      )
    ).flat();
    // P1 sells until its segments on the live masters are empty.
    const liveStock = () =>
      withDb(async (db) => {
        const { rows } = await db.query('SELECT idx, stock::int AS stock FROM stock_segments WHERE product_id = $1', [
          p1.id,
        ]);
        return rows.filter((r) => p1Masters[r.idx] !== dead).reduce((n, r) => n + r.stock, 0);
      });
    await waitFor("P1's segments on the live masters to sell out", async () => (await liveStock()) === 0, 30_000, 100);
    const drainedAt = Date.now();
    await waitFor(
      'answers for P1 after that',
      () => loads[0].outcomes.filter((o) => o.sentAt > drainedAt).length >= 30,
      15_000,
    );
    await waitFor(
      'orders of P2 after the kill',
      () => loads[1].outcomes.filter((o) => o.status === 201 && o.sentAt > killedAt + 1000).length >= 30,
      15_000,
    );
    const [one, two] = await Promise.all(loads.map((l) => l.stop()));

    const all: Outcome[] = [...one, ...two, ...twice];
    // Only the answers the contract allows, each within the bound; every 503 says when to retry.
    expect(all.filter((o) => ![201, 409, 410, 503].includes(o.status)).map(brief)).toEqual([]);
    expect(
      all
        .filter((o) => o.status === 503 && (!o.retryAfter || !['UNAVAILABLE', 'BUSY'].includes(o.code as string)))
        .map(brief),
    ).toEqual([]);
    expect(all.filter((o) => o.doneAt - o.sentAt > REPLY_BOUND_MS).map(brief)).toEqual([]);
    // P1: units remain behind the dead master all along, so never SOLD_OUT; after its live
    // segments ran dry, 503 (those units cannot be locked now), nothing else.
    expect(one.filter((o) => o.status === 410).map(brief)).toEqual([]);
    const afterDrain = one.filter((o) => o.sentAt > drainedAt);
    expect(tally(afterDrain)).toEqual({ '503 UNAVAILABLE': afterDrain.length });
    expect(one.filter((o) => o.status === 201 && o.sentAt > killedAt).length).toBeGreaterThan(0);
    // P2 (hints on the dead master) sold on after the kill.
    expect(two.filter((o) => o.status === 201 && o.sentAt > killedAt + 1000).length).toBeGreaterThanOrEqual(30);
    // Lockless users: exactly one order each, the others refused as duplicates.
    const byUser = new Map(lockless.map((u) => [u, twice.filter((o) => o.userId === u)]));
    const notOnce = [...byUser].filter(([, os]) => os.filter((o) => o.status === 201).length !== 1);
    expect(notOnce.map(([u, os]) => `${u}: ${os.map((o) => `${o.status} ${o.code ?? ''}`).join(', ')}`)).toEqual([]);
    for (const o of twice.filter((x) => x.status !== 201))
      expect([o.status, o.code]).toEqual([409, expect.stringMatching(/^(ALREADY_ORDERED|ORDER_IN_PROGRESS)$/)]);

    // PostgreSQL: I1, I2, every 201 stored, and nobody told 4xx/5xx holds an order.
    const books1 = await expectPromisesKept(testUrls().databaseUrl, p1.id, one, { failedMeansNoOrder: true });
    const books2 = await expectPromisesKept(testUrls().databaseUrl, p2.id, [...two, ...twice], {
      failedMeansNoOrder: true,
    });
    // P1's units left are exactly those on the dead master's segments.
    expect(await liveStock()).toBe(0);
    expect(books1.remaining).toBeGreaterThan(0);
    expect(books1.orders).toBe(one.filter((o) => o.status === 201).length);
    expect(books2.orders).toBe([...two, ...twice].filter((o) => o.status === 201).length);
  });
});
