// The invariants of docs/design.md (I1-I5) under concurrency: two service processes share one
// PostgreSQL and one Redis, thousands of orders arrive at once (with duplicate bursts, bad inputs
// and rebalances mixed in), and the database is checked afterwards.
import { auditProduct, resetState, withDb } from './support/database';
import {
  admin,
  createProduct,
  pooled,
  Reply,
  request,
  ServiceProcess,
  startedTogether,
  startService,
} from './support/service';
import { sleep, waitFor } from './support/wait';

const CONCURRENCY = 160;

describe('invariants under concurrent load across two service processes', () => {
  let a: ServiceProcess;
  let b: ServiceProcess;
  const pick = (i: number) => (i % 2 === 0 ? a : b).url;

  beforeAll(async () => {
    await resetState();
    [a, b] = await startedTogether([startService(), startService()]);
  });
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
  });

  type Timed = Reply & { sentAt: number; receivedAt: number };
  /** Orders answered so far: a rebalance waits for the load to be under way, not for a guessed time. */
  let answered = 0;
  const order = async (i: number, userId: string, productId: number, quantity?: number): Promise<Timed> => {
    const sentAt = performance.now();
    const r = await request(
      pick(i),
      'POST',
      '/orders',
      quantity === undefined ? { userId, productId } : { userId, productId, quantity },
    );
    answered++;
    return { ...r, sentAt, receivedAt: performance.now() };
  };
  const ordersAnswered = (more: number) => {
    const from = answered;
    return waitFor(`${more} more orders answered`, () => answered >= from + more, 60_000);
  };

  /** I3 from the clients' clocks: a 201 sent after a SOLD_OUT came back proves units remained then. */
  function falseSoldOuts(replies: Timed[]): Timed[] {
    const lastCreatedSend = Math.max(-Infinity, ...replies.filter((r) => r.status === 201).map((r) => r.sentAt));
    return replies.filter((r) => r.status === 410 && r.receivedAt < lastCreatedSend);
  }

  function statuses(replies: Reply[]): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const r of replies) {
      const key = r.status === 201 ? '201' : `${r.status} ${r.body?.code}`;
      counts[key] = (counts[key] ?? 0) + 1;
    }
    return counts;
  }

  it('should sell exactly the stock, once per user, with no false SOLD_OUT, while duplicates, bad input and a rebalance hit it', async () => {
    const STOCK = 1500;
    const product = await createProduct(a.url, { stock: STOCK, segments: 20 });
    const buyers = Array.from({ length: STOCK }, (_, i) => `buyer-${i}`);
    const tasks: Array<() => Promise<Partial<Timed> & Reply & { kind: string; userId?: string }>> = [];
    // One order per buyer: exactly as many buyers as units, so any SOLD_OUT here is false (I3).
    buyers.forEach((userId, i) =>
      tasks.push(() => order(i, userId, product.id).then((r) => ({ ...r, kind: 'buyer', userId }))),
    );
    // Bursts of duplicates: 300 buyers send three more orders each, at the same time (I2).
    for (let i = 0; i < 300; i++) {
      for (let k = 0; k < 3; k++)
        tasks.push(() =>
          order(i + k, buyers[i * 5], product.id).then((r) => ({ ...r, kind: 'duplicate', userId: buyers[i * 5] })),
        );
    }
    // Bad input in the storm (I5): each must be a 4xx that changes nothing.
    const bad: unknown[] = [
      '{"userId": "x", "productId": ',
      { userId: 'bad user', productId: product.id },
      { userId: 'ok', productId: -1 },
      { userId: 'ok', productId: product.id, quantity: 0 },
      { userId: 'ok', productId: product.id, quantity: 2 },
      { userId: 'ok', productId: 999999 },
      { userId: 'x'.repeat(65), productId: product.id },
    ];
    for (let i = 0; i < 140; i++)
      tasks.push(() => request(pick(i), 'POST', '/orders', bad[i % bad.length]).then((r) => ({ ...r, kind: 'bad' })));
    // Shuffle deterministically so duplicates and bad input interleave with first orders.
    let seed = 42;
    const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
    for (let i = tasks.length - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [tasks[i], tasks[j]] = [tasks[j], tasks[i]];
    }
    // A rebalance in the middle of the storm, to fewer segments and back (I3, I4).
    const rebalances = (async () => {
      await ordersAnswered(300);
      const first = await request(b.url, 'POST', `/admin/products/${product.id}/rebalance`, { segments: 7 }, admin);
      const second = await request(a.url, 'POST', `/admin/products/${product.id}/rebalance`, { segments: 20 }, admin);
      return [first, second];
    })();

    const replies = await pooled(tasks, CONCURRENCY);
    const rebalanced = await rebalances;

    // No 5xx at all, and every rebalance answered 200 conserving stock.
    expect(replies.filter((r) => r.status >= 500)).toEqual([]);
    for (const r of rebalanced) {
      expect(r.status).toBe(200);
      expect(r.body.before.stock + r.body.before.sold).toBe(STOCK);
      expect(r.body.after.stock + r.body.after.sold).toBe(STOCK);
    }
    // I3: every buyer got a unit: no SOLD_OUT, BUSY or anything else while units remained.
    const buyerReplies = replies.filter((r) => r.kind === 'buyer');
    const unsold = buyerReplies.filter(
      (r) => r.status !== 201 && !(r.status === 409 && r.body.code === 'ALREADY_ORDERED'),
    );
    // A buyer's own first order can lose the race to one of its duplicates; the user still has one order.
    const lostToDuplicate = unsold.filter((r) => r.status === 409 && r.body.code === 'ORDER_IN_PROGRESS');
    expect(unsold.filter((r) => !lostToDuplicate.includes(r))).toEqual([]);
    expect(buyerReplies.filter((r) => r.status === 410)).toEqual([]);
    // Duplicates may meet SOLD_OUT, but only once the stock was really gone.
    expect(falseSoldOuts(replies.filter((r) => r.kind !== 'bad') as Timed[])).toEqual([]);
    // I5: bad input always a 4xx with a code.
    for (const r of replies.filter((x) => x.kind === 'bad')) {
      expect(r.status).toBeGreaterThanOrEqual(400);
      expect(r.status).toBeLessThan(500);
      expect(['VALIDATION_FAILED', 'QUANTITY_OVER_LIMIT', 'PRODUCT_NOT_FOUND']).toContain(r.body.code);
    }
    // I2: duplicates were refused, and nobody got two 201s.
    const created = replies.filter((r) => r.status === 201);
    expect(created).toHaveLength(STOCK);
    expect(new Set(created.map((r) => r.body.userId)).size).toBe(STOCK);

    // I1 and I2 from the database.
    const audit = await auditProduct(product.id);
    expect(audit).toEqual({
      totalStock: STOCK,
      remaining: 0,
      ordered: STOCK,
      negativeSegments: 0,
      orders: STOCK,
      duplicateUsers: 0,
    });
    const ids = await withDb(async (db) =>
      (await db.query('SELECT id::text FROM orders WHERE product_id = $1', [product.id])).rows.map((r) => Number(r.id)),
    );
    expect(new Set(ids)).toEqual(new Set(created.map((r) => r.body.id)));
    // Bad input changed nothing: no order for the bad userIds.
    expect(
      await withDb(
        async (db) => (await db.query("SELECT count(*)::int AS n FROM orders WHERE user_id = 'ok'")).rows[0].n,
      ),
    ).toBe(0);

    // Now it is really sold out: late buyers get SOLD_OUT from either process.
    const late = await pooled(
      Array.from({ length: 200 }, (_, i) => () => order(i, `late-${i}`, product.id)),
      CONCURRENCY,
    );
    expect(statuses(late)).toEqual({ '410 SOLD_OUT': 200 });
    expect(await auditProduct(product.id)).toMatchObject({ remaining: 0, ordered: STOCK });
  });

  it('should give each user at most one order when every user fires twenty concurrent orders at both processes', async () => {
    const product = await createProduct(a.url, { stock: 100_000, segments: 16 });
    const users = Array.from({ length: 60 }, (_, i) => `dup-${i}`);
    const tasks = users.flatMap((u) => Array.from({ length: 20 }, (_, k) => () => order(k, u, product.id)));
    const replies = await pooled(tasks, CONCURRENCY);
    expect(replies.filter((r) => r.status >= 500)).toEqual([]);
    const created = replies.filter((r) => r.status === 201);
    expect(created).toHaveLength(users.length);
    expect(new Set(created.map((r) => r.body.userId))).toEqual(new Set(users));
    for (const r of replies.filter((x) => x.status !== 201)) {
      expect(r.status).toBe(409);
      expect(['ALREADY_ORDERED', 'ORDER_IN_PROGRESS']).toContain(r.body.code);
    }
    expect(await auditProduct(product.id)).toMatchObject({
      ordered: users.length,
      remaining: 100_000 - users.length,
      duplicateUsers: 0,
      negativeSegments: 0,
    });
  });

  it('should sell q units spread over several segments while q units remain, and refuse only when fewer remain', async () => {
    // 40 units as 20 segments of 2, limit 3: no segment ever holds 3, the product holds 13 x 3 + 1.
    const product = await createProduct(a.url, { stock: 40, segments: 20, limitPerUser: 3 });
    const tasks = Array.from({ length: 13 }, (_, i) => () => order(i, `multi-${i}`, product.id, 3));
    // Sent while the 13 orders are on their way.
    const rebalance = sleep(20).then(() =>
      request(b.url, 'POST', `/admin/products/${product.id}/rebalance`, { segments: 9 }, admin),
    );
    const replies = await pooled(tasks, 13);
    expect((await rebalance).status).toBe(200);
    expect(falseSoldOuts(replies)).toEqual([]);
    expect(statuses(replies)).toEqual({ '201': 13 });
    for (const r of replies) {
      expect(r.body.allocations.reduce((s: number, x: { quantity: number }) => s + x.quantity, 0)).toBe(3);
    }
    const tooMany = await order(0, 'multi-late', product.id, 3);
    expect(tooMany.status).toBe(410);
    expect(tooMany.body.code).toBe('SOLD_OUT');
    const last = await order(1, 'multi-last', product.id, 1);
    expect(last.status).toBe(201);
    expect(await auditProduct(product.id)).toEqual({
      totalStock: 40,
      remaining: 0,
      ordered: 40,
      negativeSegments: 0,
      orders: 14,
      duplicateUsers: 0,
    });
  });

  it('should conserve stock exactly through repeated rebalances under full order load', async () => {
    const STOCK = 50_000;
    const product = await createProduct(a.url, { stock: STOCK, segments: 16 });
    let stop = false;
    let n = 0;
    const load = pooled(
      Array.from({ length: CONCURRENCY }, () => async () => {
        const replies: Reply[] = [];
        while (!stop) {
          const i = n++;
          replies.push(await order(i, `load-${i}`, product.id));
        }
        return replies;
      }),
      CONCURRENCY,
    );
    const layouts = [5, 32, 1, 64, 16];
    const results: Reply[] = [];
    for (const [i, segments] of layouts.entries()) {
      await ordersAnswered(100);
      results.push(await request(pick(i), 'POST', `/admin/products/${product.id}/rebalance`, { segments }, admin));
    }
    stop = true;
    const replies = (await load).flat();

    expect(replies.filter((r) => r.status >= 500)).toEqual([]);
    results.forEach((r, i) => {
      expect(r.status).toBe(200);
      const after = r.body.after;
      expect(after.segmentCount).toBe(layouts[i]);
      expect(after.segments).toHaveLength(layouts[i]);
      // I4: nothing created or lost by the move, and the new sizes differ by at most one.
      expect(r.body.before.stock + r.body.before.sold).toBe(STOCK);
      expect(after.stock + after.sold).toBe(STOCK);
      expect(after.stock).toBe(r.body.before.stock);
      const sizes = after.segments.map((s: { stock: number }) => s.stock);
      expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(1);
    });
    const created = replies.filter((r) => r.status === 201).length;
    expect(created).toBeGreaterThan(0);
    expect(await auditProduct(product.id)).toEqual({
      totalStock: STOCK,
      remaining: STOCK - created,
      ordered: created,
      negativeSegments: 0,
      orders: created,
      duplicateUsers: 0,
    });
  });
});
