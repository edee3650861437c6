// The group-commit statement against the real PostgreSQL: several orders sold from one segment in
// one statement, each answered on its own, the segment deducted by exactly what was sold.
import { DataSource } from 'typeorm';
import { HttpConfig } from '../src/config/app-config';
import { dataSourceOptions } from '../src/infrastructure/data-source';
import { MetricsService } from '../src/metrics/metrics.service';
import { BatchEntry, BatchResult } from '../src/orders/order.types';
import { SaleWritesRepository, SELL_BATCH_SQL } from '../src/orders/repositories/sale-writes.repository';
import { auditProduct, productWithSegments, resetState, withDb } from './support/database';
import { testUrls } from './support/service';

describe('group commit: SaleWritesRepository.sellBatch on PostgreSQL', () => {
  let db: DataSource;
  let repo: SaleWritesRepository;

  beforeAll(async () => {
    db = await new DataSource(dataSourceOptions(testUrls().databaseUrl, { poolSize: 4 })).initialize();
    repo = new SaleWritesRepository(db, { retryAfterS: 1 } as HttpConfig, new MetricsService());
  });
  afterAll(async () => {
    await db?.destroy();
  });
  beforeEach(() => resetState());

  const product = (segments: number[]) => productWithSegments(segments, 'gc');
  const segmentStock = (productId: number, idx: number) =>
    withDb(async (c) =>
      Number(
        (await c.query('SELECT stock FROM stock_segments WHERE product_id = $1 AND idx = $2', [productId, idx])).rows[0]
          .stock,
      ),
    );
  /**
   * One fencing token for every batch here: these specs are about the statement, whose conditional
   * write keeps the segment right with no lock at all; an equal token never trips the fence
   * (test/fencing.e2e-spec.ts is about the tokens).
   */
  const TOKEN = 1;
  const sell = async (productId: number, idx: number, entries: BatchEntry[]) => {
    const out = await repo.sellBatch(productId, idx, TOKEN, entries);
    if (out.kind !== 'decided') throw new Error(`batch refused for its fencing token: ${JSON.stringify(out)}`);
    return out;
  };
  const kinds = (results: BatchResult[]) => results.map((r) => (r.kind === 'alreadyOrdered' ? 'already' : r.kind));

  it('should sell every order of a batch that fits, each with its own order row, and deduct their sum once', async () => {
    const p = await product([10, 10]);
    const batch = await sell(p, 1, [
      { userId: 'a', quantity: 1 },
      { userId: 'b', quantity: 2 },
      { userId: 'c', quantity: 3 },
    ]);
    expect(kinds(batch.results)).toEqual(['sold', 'sold', 'sold']);
    expect(batch.remaining).toBe(4);
    expect(await segmentStock(p, 1)).toBe(4);
    expect(await segmentStock(p, 0)).toBe(10);
    const ids = batch.results.map((r) => (r.kind === 'sold' ? r.order.id : 0));
    expect(new Set(ids).size).toBe(3);
    const rows = await withDb(
      async (c) =>
        (
          await c.query(
            'SELECT id, user_id, quantity, allocations FROM orders WHERE product_id = $1 ORDER BY user_id',
            [p],
          )
        ).rows,
    );
    expect(rows.map((r: { user_id: string; quantity: number }) => [r.user_id, r.quantity])).toEqual([
      ['a', 1],
      ['b', 2],
      ['c', 3],
    ]);
    expect(rows.map((r: { allocations: unknown }) => r.allocations)).toEqual([
      [{ segment: 1, quantity: 1 }],
      [{ segment: 1, quantity: 2 }],
      [{ segment: 1, quantity: 3 }],
    ]);
    const audit = await auditProduct(p);
    expect(audit.ordered + audit.remaining).toBe(audit.totalStock);
  });

  it('should sell the orders that fit, smallest first, and answer the rest short when the segment runs out', async () => {
    const p = await product([4]);
    const batch = await sell(p, 0, [
      { userId: 'big', quantity: 3 },
      { userId: 'one', quantity: 1 },
      { userId: 'two', quantity: 2 },
    ]);
    // 1 + 2 fit in 4; the 3 would not fit after them
    expect(kinds(batch.results)).toEqual(['short', 'sold', 'sold']);
    expect(batch.remaining).toBe(1);
    expect(await segmentStock(p, 0)).toBe(1);
  });

  it('should answer alreadyOrdered to a user who holds an order, and to a second entry of one user, without failing the others', async () => {
    const p = await product([10]);
    await sell(p, 0, [{ userId: 'holder', quantity: 1 }]);
    const batch = await sell(p, 0, [
      { userId: 'x', quantity: 1 },
      { userId: 'holder', quantity: 1 },
      { userId: 'y', quantity: 1 },
      { userId: 'x', quantity: 1 },
    ]);
    expect(kinds(batch.results)).toEqual(['sold', 'already', 'sold', 'already']);
    expect(batch.remaining).toBe(7);
    const audit = await auditProduct(p);
    expect(audit).toMatchObject({ orders: 3, ordered: 3, remaining: 7, duplicateUsers: 0 });
  });

  it("should record each order's admission position, and answer alreadyOrdered to an entry whose admission was spent, selling the others", async () => {
    const p = await product([10]);
    // The admission of position 5 was spent by an order that was then cancelled.
    await sell(p, 0, [{ userId: 'spender', quantity: 1, admissionPosition: 5 }]);
    await withDb((c) => c.query(`UPDATE orders SET status = 'cancelled', closed_at = now() WHERE user_id = 'spender'`));
    const batch = await sell(p, 0, [
      { userId: 'a', quantity: 1, admissionPosition: 3 },
      { userId: 'spender', quantity: 1, admissionPosition: 5 },
      { userId: 'b', quantity: 1 },
    ]);
    expect(kinds(batch.results)).toEqual(['sold', 'already', 'sold']);
    const rows = await withDb(
      async (c) =>
        (
          await c.query(
            `SELECT user_id, status, admission_position::int AS position FROM orders WHERE product_id = $1 ORDER BY id`,
            [p],
          )
        ).rows,
    );
    expect(rows).toEqual([
      { user_id: 'spender', status: 'cancelled', position: 5 },
      { user_id: 'a', status: 'reserved', position: 3 },
      { user_id: 'b', status: 'reserved', position: null },
    ]);
  });

  it('should sell nothing and change nothing from an empty segment, or a segment that no longer exists', async () => {
    const p = await product([0, 5]);
    const empty = await sell(p, 0, [
      { userId: 'a', quantity: 1 },
      { userId: 'b', quantity: 1 },
    ]);
    expect(kinds(empty.results)).toEqual(['short', 'short']);
    expect(empty.remaining).toBe(0);
    const gone = await sell(p, 7, [{ userId: 'a', quantity: 1 }]);
    expect(kinds(gone.results)).toEqual(['short']);
    expect(gone.remaining).toBeNull();
    expect((await auditProduct(p)).orders).toBe(0);
  });

  it('should never oversell a segment when concurrent batches race for it without any Redis lock', async () => {
    const p = await product([25]);
    const batches = Array.from({ length: 12 }, (_, b) =>
      sell(
        p,
        0,
        Array.from({ length: 5 }, (_, i) => ({ userId: `u${b}-${i}`, quantity: 1 })),
      ),
    );
    const results = (await Promise.all(batches)).flatMap((r) => r.results);
    expect(results.filter((r) => r.kind === 'sold')).toHaveLength(25);
    const audit = await auditProduct(p);
    expect(audit).toMatchObject({ orders: 25, remaining: 0, negativeSegments: 0, duplicateUsers: 0 });
  });

  // A new sale's first minutes: the orders table has grown far past what PostgreSQL's statistics
  // (taken while it was empty) say. The duplicate check must still look each user up through the
  // index, not read the product's orders once per user (as an anti-join plan did: 137 ms a batch).
  it("should look each batch user up by index even while the orders table's statistics are stale", async () => {
    const p = await product([100, 100]);
    await withDb(async (c) => {
      await c.query('ANALYZE orders');
      await c.query(
        `INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at)
         SELECT $1, 'old-' || i, 1, '[]', 'reserved', now() + interval '1 hour' FROM generate_series(1, 20000) AS i`,
        [p],
      );
    });
    type PlanNode = {
      'Node Type': string;
      'Relation Name'?: string;
      'Index Cond'?: string;
      'Actual Rows': number;
      'Actual Loops': number;
      Plans?: PlanNode[];
    };
    const users = Array.from({ length: 32 }, (_, i) => `new-${i}`);
    const [{ 'QUERY PLAN': plan }] = await withDb(
      async (c) =>
        (
          await c.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${SELL_BATCH_SQL}`, [
            p,
            0,
            users,
            users.map(() => 1),
            users.map(() => null),
            TOKEN,
          ])
        ).rows as Array<{
          'QUERY PLAN': Array<{ Plan: PlanNode }>;
        }>,
    );
    const reads: PlanNode[] = [];
    const walk = (n: PlanNode) => {
      if (n['Relation Name'] === 'orders' && n['Node Type'] !== 'ModifyTable') reads.push(n);
      n.Plans?.forEach(walk);
    };
    walk(plan[0].Plan);
    expect(reads.length).toBeGreaterThan(0);
    for (const r of reads) {
      expect(r['Index Cond']).toContain('user_id');
      expect(r['Actual Rows'] * r['Actual Loops']).toBe(0);
    }
  });
});
