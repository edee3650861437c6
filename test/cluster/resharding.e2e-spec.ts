// Hash slots of a 3-master Redis Cluster moved while two service processes sell (resharding with
// live keys: SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE, as redis-cli --cluster reshard
// does it): every segment-lock slot of the product and its hint slot go to another master and
// back, and 300 slots besides (with the user locks in them) move from one master to another.
// Orders keep succeeding throughout; an answer is 201 or, where a move got in the way, 503 with
// Retry-After (nothing happened); never a 500 or a hang; PostgreSQL shows the books exact.
import type { RedisClusterNode } from '../../harness/embedded-redis-cluster';
import { brief, expectPromisesKept, loadUntilStopped, tally } from '../faults/support';
import { waitFor } from '../support/wait';
import { createProduct, testUrls } from '../support/service';
import { ClusterSale, hintMaster, segmentMasters, startClusterSale } from './support';

const SEGMENTS = 20;
const REPLY_BOUND_MS = 10_000;

describe('Redis Cluster slots moved during a sale, across two service processes', () => {
  let sale: ClusterSale;

  beforeAll(async () => {
    sale = await startClusterSale({ LOG_LEVEL: 'error' });
  });
  afterAll(async () => {
    await sale?.stop();
  });

  /** Moves each slot to the master its `to` names, one moveSlots call per master. */
  async function moveEach(slots: number[], to: (slot: number, i: number) => RedisClusterNode): Promise<void> {
    for (const node of sale.cluster.nodes) {
      const mine = slots.filter((s, i) => to(s, i) === node);
      if (mine.length > 0) await sale.cluster.moveSlots(mine, node);
    }
  }

  it('should keep selling while the slots of its segment locks, its hints and 300 others move between masters, with the books exact', async () => {
    const { cluster } = sale;
    const product = await createProduct(sale.a.url, { stock: 20_000, segments: SEGMENTS });
    const keys = [
      ...Array.from({ length: SEGMENTS }, (_, idx) => `lock:stock:${product.id}:${idx}`),
      `hint:soldout:{${product.id}}`,
    ];
    const slots = await Promise.all(keys.map((k) => cluster.slotOf(k)));
    const before = [...(await segmentMasters(cluster, product.id, SEGMENTS)), await hintMaster(cluster, product.id)];
    const next = (n: RedisClusterNode) => cluster.nodes[(cluster.nodes.indexOf(n) + 1) % cluster.nodes.length];

    const load = loadUntilStopped({ concurrency: 32, productId: product.id, prefix: 'reshard', pick: sale.pick });
    const createdSince = (t: number) => load.outcomes.filter((o) => o.status === 201 && o.sentAt >= t).length;
    await waitFor('orders before the moves', () => createdSince(0) >= 50, 30_000);

    const movesBegan = Date.now();
    // Every slot of the product to the next master, 300 more from master 0 to master 1, then the
    // product's slots back home.
    await moveEach(slots, (_, i) => next(before[i]));
    const moved = [...(await segmentMasters(cluster, product.id, SEGMENTS)), await hintMaster(cluster, product.id)];
    const bulk = (await cluster.slotsOf(cluster.nodes[0])).filter((s) => !slots.includes(s)).slice(0, 300);
    await cluster.moveSlots(bulk, cluster.nodes[1]);
    await moveEach(slots, (_, i) => before[i]);
    const movesEnded = Date.now();
    const sinceMoves = () =>
      `orders after the moves (they took ${movesEnded - movesBegan} ms; answers since: ${JSON.stringify(tally(load.outcomes.filter((o) => o.sentAt >= movesEnded)))})`;
    await waitFor(sinceMoves, () => createdSince(movesEnded) >= 50, 30_000);
    const outcomes = await load.stop();

    // The moves happened: each slot went to the next master and came back.
    expect(moved).toEqual(before.map(next));
    expect([...(await segmentMasters(cluster, product.id, SEGMENTS)), await hintMaster(cluster, product.id)]).toEqual(
      before,
    );
    expect((await cluster.slotsOf(cluster.nodes[1])).filter((s) => bulk.includes(s))).toHaveLength(300);

    // 201, or 503 with Retry-After; never anything else, never past the bound.
    expect(
      outcomes
        .filter(
          (o) =>
            o.status !== 201 &&
            !(o.status === 503 && o.retryAfter && ['UNAVAILABLE', 'BUSY'].includes(o.code as string)),
        )
        .map(brief),
    ).toEqual([]);
    expect(outcomes.filter((o) => o.doneAt - o.sentAt > REPLY_BOUND_MS).map(brief)).toEqual([]);
    // Orders kept succeeding while the slots moved.
    expect(
      outcomes.filter((o) => o.status === 201 && o.sentAt >= movesBegan && o.doneAt <= movesEnded).length,
    ).toBeGreaterThan(0);
    // PostgreSQL: I1, I2, every 201 stored, nobody told 503 holds an order, no order unanswered.
    const books = await expectPromisesKept(testUrls().databaseUrl, product.id, outcomes, { failedMeansNoOrder: true });
    expect(books.orders).toBe(outcomes.filter((o) => o.status === 201).length);
  });
});
