// The HTTP API (the table in README.md, "API"), row by row, held to the invariants of
// docs/design.md: each success and each error code that can be produced deterministically, with
// the database checked after every error to prove it changed nothing. In-process (support/in-process.ts):
// what is under test is each call's answer and effect, not the process.
import type { ProductView } from '../src/inventory/product.types';
import Redis from 'ioredis';
import { freePort } from '../src/infrastructure/free-port';
import { auditProduct, resetState, withDb } from './support/database';
import { InProcessService, inProcessService, startInProcess } from './support/in-process';
import { admin, createProduct, Reply, testUrls, shop } from './support/service';

const LOCK_WAIT_MS = 200;
const RETRY_AFTER_S = 2;
const REBALANCE_WAIT_MS = 300;

/** Every row that an order or a product touches, to compare before and after a refused call. */
async function dbSnapshot() {
  return withDb(async (db) => ({
    products: (
      await db.query('SELECT id, total_stock, limit_per_user, segment_count, layout_version FROM products ORDER BY id')
    ).rows,
    segments: (await db.query('SELECT product_id, idx, stock FROM stock_segments ORDER BY product_id, idx')).rows,
    orders: (await db.query('SELECT id, product_id, user_id, quantity FROM orders ORDER BY id')).rows,
  }));
}

function expectError(res: Reply, status: number, code: string): void {
  expect({ status: res.status, code: res.body?.code }).toEqual({ status, code });
  // ALREADY_ORDERED names the order the user holds.
  const extra = code === 'ALREADY_ORDERED' ? { orderId: expect.any(Number) } : {};
  expect(res.body).toEqual({ statusCode: status, code, message: expect.any(String), ...extra });
  expect(res.text).not.toMatch(/\n\s+at |Error:/);
}

function expectEvenSplit(view: ProductView, total: number, count: number): void {
  const sizes = view.segments.map((s) => s.stock);
  expect(view.segmentCount).toBe(count);
  expect(view.segments.map((s) => s.index)).toEqual(Array.from({ length: count }, (_, i) => i));
  expect(sizes.reduce((a, b) => a + b, 0)).toBe(total);
  expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(1);
}

describe('HTTP API', () => {
  let redis: Redis;
  beforeAll(async () => {
    await resetState();
    redis = new Redis(testUrls().redisUrl);
  });
  afterAll(() => redis?.disconnect());
  const { request } = inProcessService({
    LOCK_WAIT_MS: String(LOCK_WAIT_MS),
    RETRY_AFTER_S: String(RETRY_AFTER_S),
    REBALANCE_WAIT_MS: String(REBALANCE_WAIT_MS),
  });
  let userSeq = 0;
  const user = (tag: string) => `${tag}-${++userSeq}`;
  const order = (body: unknown) => request('POST', '/orders', body);
  const view = async (id: number) =>
    (await request<ProductView>('GET', `/admin/products/${id}`, undefined, admin)).body;

  describe('POST /orders', () => {
    it('should create a reserved order of one unit and answer it with its allocation and its expiry after the payment timeout', async () => {
      const p = await createProduct(request, { stock: 10, segments: 2 });
      const res = await order({ userId: 'alice', productId: p.id });
      expect(res.status).toBe(201);
      expect(res.body).toEqual({
        id: expect.any(Number),
        productId: p.id,
        userId: 'alice',
        quantity: 1,
        allocations: [{ segment: expect.any(Number), quantity: 1 }],
        status: 'reserved',
        createdAt: expect.any(String),
        expiresAt: expect.any(String),
      });
      expect(Number.isNaN(Date.parse(res.body.createdAt))).toBe(false);
      expect(Date.parse(res.body.expiresAt) - Date.parse(res.body.createdAt)).toBe(900_000);
      const seg = res.body.allocations[0].segment;
      expect((await view(p.id)).segments[seg].stock).toBe(4);
      expect(await auditProduct(p.id)).toMatchObject({ totalStock: 10, remaining: 9, ordered: 1, orders: 1 });
    });

    it('should keep a numeric userId as its decimal string, the same user as that string', async () => {
      const p = await createProduct(request, { stock: 5, segments: 1 });
      const first = await order({ userId: 12345, productId: p.id });
      expect(first.status).toBe(201);
      expect(first.body.userId).toBe('12345');
      const again = await order({ userId: '12345', productId: p.id });
      expectError(again, 409, 'ALREADY_ORDERED');
      const stored = await withDb((db) => db.query('SELECT user_id FROM orders WHERE product_id = $1', [p.id]));
      expect(stored.rows).toEqual([{ user_id: '12345' }]);
    });

    it('should refuse an invalid body with VALIDATION_FAILED and change nothing', async () => {
      const p = await createProduct(request, { stock: 5, segments: 1 });
      const before = await dbSnapshot();
      expectError(await order({ userId: 'bob' }), 400, 'VALIDATION_FAILED');
      expectError(await order({ userId: 'bob', productId: p.id, quantity: 0 }), 400, 'VALIDATION_FAILED');
      expect(await dbSnapshot()).toEqual(before);
    });

    it("should refuse a quantity over the product's limit with QUANTITY_OVER_LIMIT and change nothing", async () => {
      const p = await createProduct(request, { stock: 10, segments: 2, limitPerUser: 2 });
      const before = await dbSnapshot();
      const res = await order({ userId: user('greedy'), productId: p.id, quantity: 3 });
      expectError(res, 400, 'QUANTITY_OVER_LIMIT');
      expect(res.body.message).toContain('2');
      expect(await dbSnapshot()).toEqual(before);
      expect((await order({ userId: user('greedy'), productId: p.id, quantity: 2 })).status).toBe(201);
    });

    it('should answer PRODUCT_NOT_FOUND for a product that does not exist and change nothing', async () => {
      const before = await dbSnapshot();
      expectError(await order({ userId: user('lost'), productId: 987654 }), 404, 'PRODUCT_NOT_FOUND');
      expect(await dbSnapshot()).toEqual(before);
    });

    it('should refuse a second order of the same user with ALREADY_ORDERED and deduct the stock once', async () => {
      const p = await createProduct(request, { stock: 10, segments: 3 });
      const u = user('twice');
      const first = await order({ userId: u, productId: p.id });
      expect(first.status).toBe(201);
      const before = await dbSnapshot();
      const again = await order({ userId: u, productId: p.id });
      expectError(again, 409, 'ALREADY_ORDERED');
      expect(again.body.orderId).toBe(first.body.id);
      expect(await dbSnapshot()).toEqual(before);
      expect(await auditProduct(p.id)).toMatchObject({
        totalStock: 10,
        remaining: 9,
        ordered: 1,
        orders: 1,
        duplicateUsers: 0,
      });
    });

    it('should let one user order each of two products once', async () => {
      const a = await createProduct(request, { stock: 2, segments: 1 });
      const b = await createProduct(request, { stock: 2, segments: 1 });
      const u = user('both');
      expect((await order({ userId: u, productId: a.id })).status).toBe(201);
      expect((await order({ userId: u, productId: b.id })).status).toBe(201);
    });

    it("should refuse with ORDER_IN_PROGRESS while the user's order lock is held, then accept once it is free", async () => {
      const p = await createProduct(request, { stock: 5, segments: 2 });
      const u = user('busyuser');
      await redis.set(`lock:order:${u}`, 'someone-else', 'PX', 5000);
      try {
        const before = await dbSnapshot();
        expectError(await order({ userId: u, productId: p.id }), 409, 'ORDER_IN_PROGRESS');
        expect(await dbSnapshot()).toEqual(before);
        expect(await redis.get(`lock:order:${u}`)).toBe('someone-else');
      } finally {
        await redis.del(`lock:order:${u}`);
      }
      expect((await order({ userId: u, productId: p.id })).status).toBe(201);
    });

    it('should sell every unit and answer SOLD_OUT only once the stock is really gone', async () => {
      const p = await createProduct(request, { stock: 3, segments: 2 });
      const buyers: string[] = [];
      for (let i = 0; i < 3; i++) {
        buyers.push(user('buyer'));
        const res = await order({ userId: buyers[i], productId: p.id });
        expect(res.status).toBe(201);
        expect(await auditProduct(p.id)).toMatchObject({ remaining: 2 - i, ordered: i + 1 });
      }
      const before = await dbSnapshot();
      expectError(await order({ userId: user('late'), productId: p.id }), 410, 'SOLD_OUT');
      expectError(await order({ userId: user('later'), productId: p.id }), 410, 'SOLD_OUT');
      // A buyer retrying after the sell-out learns that its order exists.
      expectError(await order({ userId: buyers[0], productId: p.id }), 409, 'ALREADY_ORDERED');
      expect(await dbSnapshot()).toEqual(before);
      expect(await auditProduct(p.id)).toEqual({
        totalStock: 3,
        remaining: 0,
        ordered: 3,
        negativeSegments: 0,
        orders: 3,
        duplicateUsers: 0,
      });
    });

    it('should answer SOLD_OUT at once for a product stocked with zero units', async () => {
      const p = await createProduct(request, { stock: 0, segments: 3 });
      expect(p.segments).toEqual([0, 1, 2].map((index) => ({ index, stock: 0 })));
      const before = await dbSnapshot();
      expectError(await order({ userId: user('none'), productId: p.id }), 410, 'SOLD_OUT');
      expect(await dbSnapshot()).toEqual(before);
    });

    it('should answer SOLD_OUT when fewer units remain than asked, and still sell the units that remain', async () => {
      const p = await createProduct(request, { stock: 3, segments: 3, limitPerUser: 5 });
      const before = await dbSnapshot();
      const res = await order({ userId: user('many'), productId: p.id, quantity: 4 });
      expectError(res, 410, 'SOLD_OUT');
      expect(res.body.message).toMatch(/3/);
      expect(await dbSnapshot()).toEqual(before);
      const rest = await order({ userId: user('many'), productId: p.id, quantity: 3 });
      expect(rest.status).toBe(201);
      expect(await auditProduct(p.id)).toMatchObject({ totalStock: 3, remaining: 0, ordered: 3 });
    });

    it('should spread a quantity over several segments when no single segment holds it', async () => {
      const p = await createProduct(request, { stock: 4, segments: 4, limitPerUser: 3 });
      const res = await order({ userId: user('spread'), productId: p.id, quantity: 3 });
      expect(res.status).toBe(201);
      expect(res.body.quantity).toBe(3);
      const allocations = res.body.allocations as Array<{ segment: number; quantity: number }>;
      expect(allocations.length).toBeGreaterThan(1);
      expect(allocations.reduce((sum, a) => sum + a.quantity, 0)).toBe(3);
      expect(new Set(allocations.map((a) => a.segment)).size).toBe(allocations.length);
      const after = await view(p.id);
      for (const a of allocations) expect(after.segments[a.segment].stock).toBe(1 - a.quantity);
      expect(await auditProduct(p.id)).toMatchObject({ totalStock: 4, remaining: 1, ordered: 3, negativeSegments: 0 });
    });

    it('should answer BUSY with Retry-After when every segment stays locked past LOCK_WAIT_MS, and free the user', async () => {
      const p = await createProduct(request, { stock: 6, segments: 3 });
      const keys = [0, 1, 2].map((i) => `lock:stock:${p.id}:${i}`);
      const u = user('waiter');
      for (const k of keys) await redis.set(k, 'held-by-test', 'PX', 5000);
      try {
        const before = await dbSnapshot();
        const started = Date.now();
        const res = await order({ userId: u, productId: p.id });
        expectError(res, 503, 'BUSY');
        expect(res.headers['retry-after']).toBe(String(RETRY_AFTER_S));
        expect(Date.now() - started).toBeGreaterThanOrEqual(LOCK_WAIT_MS - 20);
        expect(await dbSnapshot()).toEqual(before);
        expect(await redis.exists(`lock:order:${u}`)).toBe(0);
      } finally {
        await redis.del(...keys);
      }
      expect((await order({ userId: u, productId: p.id })).status).toBe(201);
    });
  });

  describe('GET /orders/:id', () => {
    it('should answer an order exactly as it was created', async () => {
      const p = await createProduct(request, { stock: 3, segments: 1 });
      const created = await order({ userId: user('reader'), productId: p.id });
      expect(created.status).toBe(201);
      const res = await request('GET', `/orders/${created.body.id}`, undefined, shop);
      expect(res.status).toBe(200);
      expect(res.body).toEqual(created.body);
    });

    it.each([
      ['an id that was never issued', '987654321'],
      ['a non-numeric id', 'abc'],
      ['zero', '0'],
      ['a negative id', '-1'],
      ['an id longer than a bigint', '123456789012345678901234'],
    ])('should answer ORDER_NOT_FOUND for %s', async (_name, id) => {
      expectError(await request('GET', `/orders/${id}`, undefined, shop), 404, 'ORDER_NOT_FOUND');
    });
  });

  describe('POST /admin/products', () => {
    it('should create a product with its stock split evenly over the segments, an open window and the default payment timeout', async () => {
      const res = await request<ProductView>(
        'POST',
        '/admin/products',
        { name: 'Sneaker', stock: 10, segments: 4 },
        admin,
      );
      expect(res.status).toBe(201);
      expect(res.body).toEqual({
        id: expect.any(Number),
        name: 'Sneaker',
        stocked: 10,
        stock: 10,
        sold: 0,
        reserved: 0,
        paid: 0,
        limitPerUser: 1,
        startsAt: null,
        endsAt: null,
        paymentTimeoutS: 900,
        waitingRoom: false,
        admissionTtlS: 120,
        proofOfWork: false,
        continueUrl: null,
        segmentCount: 4,
        segments: [
          { index: 0, stock: 3 },
          { index: 1, stock: 3 },
          { index: 2, stock: 2 },
          { index: 3, stock: 2 },
        ],
      });
      expect(await auditProduct(res.body.id)).toMatchObject({ totalStock: 10, remaining: 10, ordered: 0 });
    });

    it('should split a large stock over the most segments with sizes that differ by at most one', async () => {
      const res = await request<ProductView>(
        'POST',
        '/admin/products',
        { name: 'Big', stock: 1_000_000_000, segments: 1024, limitPerUser: 7 },
        admin,
      );
      expect(res.status).toBe(201);
      expect(res.body.limitPerUser).toBe(7);
      expectEvenSplit(res.body, 1_000_000_000, 1024);
    });

    it('should refuse an invalid product with VALIDATION_FAILED and create nothing', async () => {
      const before = await dbSnapshot();
      const res = await request('POST', '/admin/products', { name: 'x', stock: 10, segments: 0 }, admin);
      expectError(res, 400, 'VALIDATION_FAILED');
      expect(res.body.message).toContain('segments');
      expect(await dbSnapshot()).toEqual(before);
    });

    it.each([
      ['no Authorization header', {}],
      ['a wrong bearer token', { authorization: 'Bearer not-the-admin-token-0000' }],
      ['the right token under another scheme', { authorization: admin.authorization.replace('Bearer', 'Basic') }],
      ['the bare token without a scheme', { authorization: admin.authorization.slice('Bearer '.length) }],
      ['the right token with a suffix', { authorization: `${admin.authorization}x` }],
    ])('should refuse with UNAUTHORIZED a call with %s and create nothing', async (_name, headers) => {
      const before = await dbSnapshot();
      expectError(
        await request('POST', '/admin/products', { name: 'x', stock: 10, segments: 2 }, headers),
        401,
        'UNAUTHORIZED',
      );
      expect(await dbSnapshot()).toEqual(before);
    });
  });

  describe('GET /admin/products/:id', () => {
    it('should show the units remaining, the units sold and the stock of each segment', async () => {
      const p = await createProduct(request, { stock: 9, segments: 3, limitPerUser: 2 });
      const o = await order({ userId: user('viewer'), productId: p.id, quantity: 2 });
      expect(o.status).toBe(201);
      const res = await request<ProductView>('GET', `/admin/products/${p.id}`, undefined, admin);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({
        id: p.id,
        name: 'test product',
        stock: 7,
        sold: 2,
        limitPerUser: 2,
        segmentCount: 3,
      });
      const expected = [3, 3, 3];
      for (const a of o.body.allocations) expected[a.segment] -= a.quantity;
      expect(res.body.segments).toEqual(expected.map((stock, index) => ({ index, stock })));
    });

    it('should refuse a view without the admin token', async () => {
      const p = await createProduct(request, { stock: 1, segments: 1 });
      expectError(await request('GET', `/admin/products/${p.id}`), 401, 'UNAUTHORIZED');
      expectError(
        await request('GET', `/admin/products/${p.id}`, undefined, { authorization: 'Bearer wrong-token-wrong-token' }),
        401,
        'UNAUTHORIZED',
      );
    });

    it.each([
      ['an unknown id', '987654'],
      ['a non-numeric id', 'abc'],
      ['an id beyond the integer range', '2147483648'],
    ])('should answer PRODUCT_NOT_FOUND for %s', async (_name, id) => {
      expectError(await request('GET', `/admin/products/${id}`, undefined, admin), 404, 'PRODUCT_NOT_FOUND');
    });
  });

  describe('POST /admin/products/:id/rebalance', () => {
    const rebalance = (id: number | string, body?: unknown, headers: Record<string, string> = admin) =>
      request<{ before: ProductView; after: ProductView }>('POST', `/admin/products/${id}/rebalance`, body, headers);

    it('should even out the remaining units over the same segments when no count is given', async () => {
      const p = await createProduct(request, { stock: 8, segments: 4, limitPerUser: 3 });
      for (const q of [3, 2])
        expect((await order({ userId: user('skew'), productId: p.id, quantity: q })).status).toBe(201);
      const shown = await view(p.id);
      const res = await rebalance(p.id);
      expect(res.status).toBe(200);
      expect(res.body.before).toEqual(shown);
      expect(res.body.after).toMatchObject({ id: p.id, stock: 3, sold: 5, segmentCount: 4 });
      expectEvenSplit(res.body.after, 3, 4);
      expect(await view(p.id)).toEqual(res.body.after);
      expect(await auditProduct(p.id)).toMatchObject({ totalStock: 8, remaining: 3, ordered: 5, negativeSegments: 0 });
    });

    it('should move the remaining units onto more and then fewer segments, conserving them, and keep selling', async () => {
      const p = await createProduct(request, { stock: 11, segments: 2 });
      expect((await order({ userId: user('pre'), productId: p.id })).status).toBe(201);
      const grown = await rebalance(p.id, { segments: 5 });
      expect(grown.status).toBe(200);
      expect(grown.body.before.segmentCount).toBe(2);
      expectEvenSplit(grown.body.after, 10, 5);
      const shrunk = await rebalance(p.id, { segments: 1 });
      expect(shrunk.status).toBe(200);
      expect(shrunk.body.before).toEqual(grown.body.after);
      expect(shrunk.body.after.segments).toEqual([{ index: 0, stock: 10 }]);
      const next = await order({ userId: user('post'), productId: p.id });
      expect(next.status).toBe(201);
      expect(next.body.allocations).toEqual([{ segment: 0, quantity: 1 }]);
      expect(await auditProduct(p.id)).toMatchObject({ totalStock: 11, remaining: 9, ordered: 2, negativeSegments: 0 });
      const segRows = await withDb((db) => db.query('SELECT idx FROM stock_segments WHERE product_id = $1', [p.id]));
      expect(segRows.rows).toEqual([{ idx: 0 }]);
    });

    it.each([
      ['to zero segments', { segments: 0 }],
      ['to more than 1024 segments', { segments: 1025 }],
      ['to a segment count that is not a number', { segments: 'x' }],
      ['to a fractional segment count', { segments: 2.5 }],
      ['with an unknown field', { segments: 2, force: true }],
    ])('should refuse a rebalance %s with VALIDATION_FAILED and move nothing', async (_name, body) => {
      const p = await createProduct(request, { stock: 6, segments: 3 });
      const before = await dbSnapshot();
      expectError(await rebalance(p.id, body), 400, 'VALIDATION_FAILED');
      expect(await dbSnapshot()).toEqual(before);
    });

    it('should refuse a rebalance without the admin token and move nothing', async () => {
      const p = await createProduct(request, { stock: 6, segments: 3 });
      const before = await dbSnapshot();
      expectError(await rebalance(p.id, { segments: 2 }, {}), 401, 'UNAUTHORIZED');
      expectError(
        await rebalance(p.id, { segments: 2 }, { authorization: 'Bearer nope-nope-nope-nope' }),
        401,
        'UNAUTHORIZED',
      );
      expect(await dbSnapshot()).toEqual(before);
    });

    it('should answer BUSY with Retry-After when a segment stays locked past REBALANCE_WAIT_MS, and move nothing', async () => {
      const p = await createProduct(request, { stock: 6, segments: 3 });
      const before = await dbSnapshot();
      // Another transaction holds segment 1's row, as an order deducting from it would.
      const res = await withDb(async (db) => {
        await db.query('BEGIN');
        try {
          await db.query('SELECT stock FROM stock_segments WHERE product_id = $1 AND idx = 1 FOR UPDATE', [p.id]);
          const started = Date.now();
          const r = await rebalance(p.id, { segments: 2 });
          expect(Date.now() - started).toBeGreaterThanOrEqual(REBALANCE_WAIT_MS - 50);
          return r;
        } finally {
          await db.query('ROLLBACK');
        }
      });
      expectError(res, 503, 'BUSY');
      expect(res.headers['retry-after']).toBe(String(RETRY_AFTER_S));
      expect(await dbSnapshot()).toEqual(before);
      expect((await rebalance(p.id, { segments: 2 })).status).toBe(200);
    });

    it('should answer PRODUCT_NOT_FOUND for a rebalance of an unknown product', async () => {
      const before = await dbSnapshot();
      expectError(await rebalance(987654, { segments: 2 }), 404, 'PRODUCT_NOT_FOUND');
      expectError(await rebalance('abc'), 404, 'PRODUCT_NOT_FOUND');
      expect(await dbSnapshot()).toEqual(before);
    });
  });

  describe('health and routing', () => {
    it('should report healthy while PostgreSQL and Redis answer', async () => {
      const res = await request('GET', '/health');
      expect(res.status).toBe(200);
      expect(res.body.status).toBe('ok');
    });

    it.each([
      ['GET', '/no/such/route'],
      ['DELETE', '/orders/1'],
      ['PUT', '/admin/products'],
    ])('should answer NOT_FOUND for %s %s', async (method, path) => {
      expectError(await request(method, path, undefined, admin), 404, 'NOT_FOUND');
    });
  });
});

describe('HTTP API without Redis', () => {
  let svc: InProcessService;

  beforeAll(async () => {
    // A port nothing listens on: the service starts, but every Redis call fails at once.
    const deadRedis = `redis://127.0.0.1:${await freePort()}`;
    svc = await startInProcess({ REDIS_URL: deadRedis, REDIS_TIMEOUT_MS: '200', RETRY_AFTER_S: '3' });
  });
  afterAll(async () => svc && (await svc.close()));

  it('should answer UNAVAILABLE with Retry-After for an order and sell nothing', async () => {
    const p = await withDb(async (db) => {
      const { rows } = await db.query(
        `INSERT INTO products (name, total_stock, segment_count) VALUES ('offline', 2, 1) RETURNING id`,
      );
      await db.query('INSERT INTO stock_segments (product_id, idx, stock) VALUES ($1, 0, 2)', [rows[0].id]);
      return rows[0].id as number;
    });
    const res = await svc.request('POST', '/orders', { userId: 'offline-user', productId: p });
    expectError(res, 503, 'UNAVAILABLE');
    expect(res.headers['retry-after']).toBe('3');
    expect(await auditProduct(p)).toMatchObject({ totalStock: 2, remaining: 2, ordered: 0, orders: 0 });
  });

  it('should report unhealthy with 503 and Retry-After', async () => {
    const res = await svc.request('GET', '/health');
    expect(res.status).toBe(503);
    expect(res.headers['retry-after']).toBeDefined();
  });
});
