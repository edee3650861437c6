// The order's life and the sale's terms, row by row of the API table (README.md, "API") held to the
// invariants of docs/design.md: pay, cancel, expiry, restock, PATCH and sale windows, each success
// and each error code, with the database compared before and after every refusal to prove it
// changed nothing. In-process (support/in-process.ts); the sweeping app of the expiry block is a
// second app in the same process, as what it proves is the sweep, not a second process.
import Redis from 'ioredis';
import type { ProductView } from '../src/inventory/product.types';
import { hintKeys } from '../src/infrastructure/redis-keys';
import { sleep, waitFor } from './support/wait';
import { resetState, withDb } from './support/database';
import { inProcessService, startInProcess } from './support/in-process';
import { admin, createProduct, NewTestProduct, Reply, testUrls, shop } from './support/service';

const RETRY_AFTER_S = 2;

/** Every row the lifecycle touches. */
async function dbSnapshot() {
  return withDb(async (db) => ({
    products: (
      await db.query(
        'SELECT id, name, total_stock, limit_per_user, segment_count, layout_version, starts_at, ends_at, payment_timeout_s FROM products ORDER BY id',
      )
    ).rows,
    segments: (await db.query('SELECT product_id, idx, stock FROM stock_segments ORDER BY product_id, idx')).rows,
    orders: (
      await db.query(
        'SELECT id, product_id, user_id, quantity, status, expires_at, paid_at, closed_at FROM orders ORDER BY id',
      )
    ).rows,
  }));
}

function expectError(res: Reply, status: number, code: string): void {
  expect({ status: res.status, code: res.body?.code }).toEqual({ status, code });
  expect(res.body).toEqual({ statusCode: status, code, message: expect.any(String) });
}

const ISO = expect.stringMatching(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);

describe('Order lifecycle and sale terms', () => {
  // EXPIRY_SWEEP_MS=0: this process never sweeps, so "past expiresAt but not yet swept" is a state
  // the tests can hold; the expiry describe block starts a sweeping app of its own.
  let redis: Redis;
  beforeAll(async () => {
    await resetState();
    redis = new Redis(testUrls().redisUrl);
  });
  afterAll(() => redis?.disconnect());
  const { request } = inProcessService({ EXPIRY_SWEEP_MS: '0', RETRY_AFTER_S: String(RETRY_AFTER_S) });
  let userSeq = 0;
  const user = (tag: string) => `${tag}-${++userSeq}`;
  const order = (userId: string, productId: number, quantity?: number) =>
    request('POST', '/orders', { userId, productId, quantity });
  const pay = (id: unknown, userId: unknown) => request('POST', `/orders/${String(id)}/pay`, { userId }, shop);
  const cancel = (id: unknown, userId: unknown) => request('POST', `/orders/${String(id)}/cancel`, { userId }, shop);
  const view = async (id: number) =>
    (await request<ProductView>('GET', `/admin/products/${id}`, undefined, admin)).body;
  const patch = (id: number, body: unknown, headers = admin) =>
    request<ProductView>('PATCH', `/admin/products/${id}`, body, headers);
  const restock = (id: number, body: unknown, headers = admin) =>
    request<ProductView>('POST', `/admin/products/${id}/restock`, body, headers);
  const product = (p: Partial<NewTestProduct> = {}) => createProduct(request, { stock: 10, segments: 2, ...p });
  /** A reserved order of a new user. */
  const reserve = async (productId: number) => {
    const userId = user('buyer');
    const res = await order(userId, productId);
    expect(res.status).toBe(201);
    return {
      userId,
      order: res.body as {
        id: number;
        status: string;
        allocations: Array<{ segment: number; quantity: number }>;
        expiresAt: string;
      },
    };
  };
  /** Refused calls must leave every row as it was. */
  const unchangedBy = async (call: () => Promise<Reply>, status: number, code: string) => {
    const before = await dbSnapshot();
    expectError(await call(), status, code);
    expect(await dbSnapshot()).toEqual(before);
  };

  describe('POST /orders/:id/pay', () => {
    it('should pay a reserved order, answer it paid with paidAt, and count it paid in the product view', async () => {
      const p = await product();
      const { userId, order: o } = await reserve(p.id);
      const res = await pay(o.id, userId);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ id: o.id, status: 'paid', paidAt: ISO, expiresAt: o.expiresAt });
      expect(res.body.closedAt).toBeUndefined();
      expect((await request('GET', `/orders/${o.id}`, undefined, shop)).body).toEqual(res.body);
      expect(await view(p.id)).toMatchObject({ stocked: 10, stock: 9, sold: 1, reserved: 0, paid: 1 });
    });

    it('should answer a second payment 200 with the order unchanged', async () => {
      const p = await product();
      const { userId, order: o } = await reserve(p.id);
      const first = await pay(o.id, userId);
      const before = await dbSnapshot();
      const again = await pay(o.id, userId);
      expect(again.status).toBe(200);
      expect(again.body).toEqual(first.body);
      expect(await dbSnapshot()).toEqual(before);
    });

    it("should answer ORDER_NOT_FOUND for another user's order or an unknown id, VALIDATION_FAILED for an id that is not one, and change nothing", async () => {
      const p = await product();
      const { order: o } = await reserve(p.id);
      await unchangedBy(() => pay(o.id, 'someone-else'), 404, 'ORDER_NOT_FOUND');
      await unchangedBy(() => pay(999_999_999, 'someone-else'), 404, 'ORDER_NOT_FOUND');
      await unchangedBy(() => pay('abc', 'someone-else'), 400, 'VALIDATION_FAILED');
      await unchangedBy(() => pay('-1', 'someone-else'), 400, 'VALIDATION_FAILED');
    });

    it('should refuse a body without a valid userId with VALIDATION_FAILED and change nothing', async () => {
      const p = await product();
      const { order: o } = await reserve(p.id);
      await unchangedBy(() => request('POST', `/orders/${o.id}/pay`, {}, shop), 400, 'VALIDATION_FAILED');
      await unchangedBy(() => pay(o.id, 'has space'), 400, 'VALIDATION_FAILED');
      await unchangedBy(() => pay(o.id, null), 400, 'VALIDATION_FAILED');
      await unchangedBy(
        () => request('POST', `/orders/${o.id}/pay`, { userId: 'x', amount: 5 }, shop),
        400,
        'VALIDATION_FAILED',
      );
    });

    it('should refuse to pay a cancelled order with ORDER_CANCELLED and change nothing', async () => {
      const p = await product();
      const { userId, order: o } = await reserve(p.id);
      expect((await cancel(o.id, userId)).status).toBe(200);
      await unchangedBy(() => pay(o.id, userId), 409, 'ORDER_CANCELLED');
    });
  });

  describe('POST /orders/:id/cancel', () => {
    it('should cancel a reserved order and put its unit back into the segment it came from at once', async () => {
      const p = await product({ stock: 6, segments: 3 });
      const { userId, order: o } = await reserve(p.id);
      const seg = o.allocations[0].segment;
      expect((await view(p.id)).segments[seg].stock).toBe(1);
      const res = await cancel(o.id, userId);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ id: o.id, status: 'cancelled', closedAt: ISO });
      expect(res.body.paidAt).toBeUndefined();
      expect(await view(p.id)).toMatchObject({ stocked: 6, stock: 6, sold: 0, reserved: 0, paid: 0 });
      expect((await view(p.id)).segments[seg].stock).toBe(2);
    });

    it('should answer a second cancel 200 with the order unchanged and return the unit only once', async () => {
      const p = await product();
      const { userId, order: o } = await reserve(p.id);
      const first = await cancel(o.id, userId);
      const before = await dbSnapshot();
      const again = await cancel(o.id, userId);
      expect(again.status).toBe(200);
      expect(again.body).toEqual(first.body);
      expect(await dbSnapshot()).toEqual(before);
      expect((await view(p.id)).stock).toBe(10);
    });

    it('should refuse to cancel a paid order with ORDER_PAID and change nothing', async () => {
      const p = await product();
      const { userId, order: o } = await reserve(p.id);
      expect((await pay(o.id, userId)).status).toBe(200);
      await unchangedBy(() => cancel(o.id, userId), 409, 'ORDER_PAID');
    });

    it("should answer ORDER_NOT_FOUND for another user's order or an unknown id, VALIDATION_FAILED for a malformed one, and change nothing", async () => {
      const p = await product();
      const { order: o } = await reserve(p.id);
      await unchangedBy(() => cancel(o.id, 'someone-else'), 404, 'ORDER_NOT_FOUND');
      await unchangedBy(() => cancel(123_456_789, 'x'), 404, 'ORDER_NOT_FOUND');
      await unchangedBy(() => cancel('1.5', 'x'), 400, 'VALIDATION_FAILED');
    });

    it('should let a user whose order was cancelled order the product again, as a new order', async () => {
      const p = await product();
      const { userId, order: o } = await reserve(p.id);
      const refused = await order(userId, p.id);
      expect({ status: refused.status, code: refused.body.code, orderId: refused.body.orderId }).toEqual({
        status: 409,
        code: 'ALREADY_ORDERED',
        orderId: o.id,
      });
      expect((await cancel(o.id, userId)).status).toBe(200);
      const again = await order(userId, p.id);
      expect(again.status).toBe(201);
      expect(again.body.id).not.toBe(o.id);
      expect(await view(p.id)).toMatchObject({ stock: 9, reserved: 1 });
    });

    it('should sell a cancelled unit at once to a buyer who was just refused SOLD_OUT', async () => {
      const p = await product({ stock: 1, segments: 1 });
      const { userId, order: o } = await reserve(p.id);
      const late = user('late');
      expectError(await order(late, p.id), 410, 'SOLD_OUT');
      // The refusal set the sold-out flag; the cancel clears it with the empty hints.
      expect(await redis.exists(hintKeys.soldOut(p.id))).toBe(1);
      expect((await cancel(o.id, userId)).status).toBe(200);
      expect(await redis.exists(hintKeys.soldOut(p.id))).toBe(0);
      expect((await order(late, p.id)).status).toBe(201);
    });
  });

  describe('expiry', () => {
    it('should refuse to pay or cancel a reservation past its expiresAt with ORDER_EXPIRED before any sweep, changing nothing', async () => {
      const p = await product({ paymentTimeoutS: 1 });
      const { userId, order: o } = await reserve(p.id);
      expect(Date.parse(o.expiresAt) - Date.now()).toBeLessThanOrEqual(1000);
      await waitFor('the reservation to run out', () => Date.now() > Date.parse(o.expiresAt) + 50);
      await unchangedBy(() => pay(o.id, userId), 409, 'ORDER_EXPIRED');
      await unchangedBy(() => cancel(o.id, userId), 409, 'ORDER_EXPIRED');
      // Nobody swept (EXPIRY_SWEEP_MS=0): PostgreSQL decided from expires_at alone.
      expect((await request('GET', `/orders/${o.id}`, undefined, shop)).body.status).toBe('reserved');
    });

    it('should expire a reservation within the sweep period of a sweeping process, return its unit once, and let its user order again', async () => {
      const p = await product({ stock: 4, segments: 2, paymentTimeoutS: 1 });
      const { userId, order: o } = await reserve(p.id);
      const sweeper = await startInProcess({ EXPIRY_SWEEP_MS: '100' });
      try {
        const expired = await waitFor(
          'the sweep to expire the order',
          async () => {
            const r = await sweeper.request('GET', `/orders/${o.id}`, undefined, shop);
            return r.body.status === 'expired' ? r.body : null;
          },
          30_000,
        );
        expect(expired).toMatchObject({ status: 'expired', closedAt: ISO });
        expect(Date.parse(expired.closedAt)).toBeGreaterThanOrEqual(Date.parse(o.expiresAt));
        expect(await view(p.id)).toMatchObject({ stocked: 4, stock: 4, reserved: 0, paid: 0 });
        await unchangedBy(() => pay(o.id, userId), 409, 'ORDER_EXPIRED');
        await unchangedBy(() => cancel(o.id, userId), 409, 'ORDER_EXPIRED');
        // A second sweep finds nothing more to return.
        await sleep(300); // past another sweep
        expect((await view(p.id)).stock).toBe(4);
        const metrics = (await sweeper.request('GET', '/metrics')).text;
        expect(metrics).toMatch(/flashsale_order_transitions_total\{to="expired"\} [1-9]/);
        expect(metrics).toMatch(/flashsale_units_returned_total\{reason="expired"\} [1-9]/);
        expect(metrics).toMatch(/flashsale_expiry_lag_seconds_count [1-9]/);
        expect((await order(userId, p.id)).status).toBe(201);
      } finally {
        await sweeper.close();
      }
    });
  });

  describe('POST /admin/products/:id/restock', () => {
    it('should add the units to the smallest segments so that sizes end as even as possible', async () => {
      const p = await product({ stock: 4, segments: 2 });
      await reserve(p.id);
      await reserve(p.id);
      const before = await view(p.id);
      const res = await restock(p.id, { units: 5 });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ stocked: 9, stock: 7, reserved: 2 });
      const sizes = res.body.segments.map((s) => s.stock);
      expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(1);
      expect(res.body.segments.every((s, i) => s.stock >= before.segments[i].stock)).toBe(true);
    });

    it('should sell restocked units at once to a buyer who was refused SOLD_OUT', async () => {
      const p = await product({ stock: 1, segments: 1 });
      await reserve(p.id);
      const late = user('late');
      expectError(await order(late, p.id), 410, 'SOLD_OUT');
      expect((await restock(p.id, { units: 1 })).status).toBe(200);
      expect((await order(late, p.id)).status).toBe(201);
    });

    it.each([
      ['zero units', { units: 0 }],
      ['negative units', { units: -3 }],
      ['fractional units', { units: 1.5 }],
      ['units as a string', { units: '5' }],
      ['more than 10^9 units', { units: 1_000_000_001 }],
      ['no units', {}],
      ['an unknown field', { units: 1, segments: 2 }],
    ])('should refuse %s with VALIDATION_FAILED and add nothing', async (_name, body) => {
      const p = await product();
      await unchangedBy(() => restock(p.id, body), 400, 'VALIDATION_FAILED');
    });

    it('should answer PRODUCT_NOT_FOUND for an unknown product and UNAUTHENTICATED without the token, adding nothing', async () => {
      const p = await product();
      await unchangedBy(() => restock(987_654, { units: 1 }), 404, 'PRODUCT_NOT_FOUND');
      await unchangedBy(() => restock(p.id, { units: 1 }, {} as typeof admin), 401, 'UNAUTHENTICATED');
    });
  });

  describe('PATCH /admin/products/:id', () => {
    it('should change name, limit, window and payment timeout, and give new reservations the new timeout', async () => {
      const p = await product();
      const startsAt = new Date(Date.now() - 60_000).toISOString();
      const endsAt = new Date(Date.now() + 3_600_000).toISOString();
      const res = await patch(p.id, { name: 'Renamed', limitPerUser: 3, startsAt, endsAt, paymentTimeoutS: 60 });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({
        name: 'Renamed',
        limitPerUser: 3,
        startsAt,
        endsAt,
        paymentTimeoutS: 60,
        stock: 10,
      });
      const o = await order(user('after-patch'), p.id, 3);
      expect(o.status).toBe(201);
      expect(Date.parse(o.body.expiresAt) - Date.parse(o.body.createdAt)).toBe(60_000);
    });

    it('should keep the fields left out and open a window bound set to null', async () => {
      const p = await product({ endsAt: new Date(Date.now() + 3_600_000).toISOString() });
      const res = await patch(p.id, { endsAt: null });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({
        name: 'test product',
        limitPerUser: 1,
        startsAt: null,
        endsAt: null,
        paymentTimeoutS: 900,
      });
    });

    it.each([
      ['a startsAt that is not a date', { startsAt: 'tomorrow' }],
      ['a startsAt without a zone', { startsAt: '2026-11-22T10:00:00' }],
      ['a startsAt as a number', { startsAt: 1_790_000_000_000 }],
      ['an impossible date', { endsAt: '2026-02-30T10:00:00Z' }],
      ['an endsAt before startsAt', { startsAt: '2026-12-01T10:00:00Z', endsAt: '2026-12-01T09:00:00Z' }],
      ['an endsAt equal to startsAt', { startsAt: '2026-12-01T10:00:00Z', endsAt: '2026-12-01T10:00:00Z' }],
      ['a payment timeout of 0', { paymentTimeoutS: 0 }],
      ['a payment timeout over a day', { paymentTimeoutS: 86_401 }],
      ['a fractional payment timeout', { paymentTimeoutS: 1.5 }],
      ['a limit of 0', { limitPerUser: 0 }],
      ['an empty name', { name: '' }],
      ['a stock field (restock is its own call)', { stock: 5 }],
    ])('should refuse %s with VALIDATION_FAILED and change nothing', async (_name, body) => {
      const p = await product();
      await unchangedBy(() => patch(p.id, body), 400, 'VALIDATION_FAILED');
    });

    it('should refuse an endsAt before the startsAt the product already has, changing nothing', async () => {
      const p = await product({ startsAt: '2030-01-01T00:00:00Z' });
      await unchangedBy(() => patch(p.id, { endsAt: '2029-12-31T00:00:00Z' }), 400, 'VALIDATION_FAILED');
    });

    it('should answer PRODUCT_NOT_FOUND for an unknown product and UNAUTHENTICATED without the token, changing nothing', async () => {
      const p = await product();
      await unchangedBy(() => patch(987_654, { name: 'x' }), 404, 'PRODUCT_NOT_FOUND');
      await unchangedBy(() => patch(p.id, { name: 'x' }, {} as typeof admin), 401, 'UNAUTHENTICATED');
    });
  });

  describe('sale windows', () => {
    it('should refuse an order before startsAt with SALE_NOT_STARTED and a Retry-After of the seconds left, taking no lock and writing nothing', async () => {
      const p = await product({ startsAt: new Date(Date.now() + 120_000).toISOString() });
      const buyer = user('early');
      const before = await dbSnapshot();
      const res = await order(buyer, p.id);
      expectError(res, 403, 'SALE_NOT_STARTED');
      expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(115);
      expect(Number(res.headers['retry-after'])).toBeLessThanOrEqual(120);
      expect(await redis.exists(`lock:order:${buyer}`)).toBe(0);
      expect(await dbSnapshot()).toEqual(before);
    });

    it('should refuse an order after endsAt with SALE_ENDED and write nothing', async () => {
      const p = await product({
        startsAt: new Date(Date.now() - 120_000).toISOString(),
        endsAt: new Date(Date.now() - 60_000).toISOString(),
      });
      await unchangedBy(() => order(user('late'), p.id), 403, 'SALE_ENDED');
    });

    it('should sell once a PATCH opens the window', async () => {
      const p = await product({ startsAt: new Date(Date.now() + 120_000).toISOString() });
      const buyer = user('waiting');
      expectError(await order(buyer, p.id), 403, 'SALE_NOT_STARTED');
      expect((await patch(p.id, { startsAt: null })).status).toBe(200);
      expect((await order(buyer, p.id)).status).toBe(201);
    });

    it('should refuse to create a product whose endsAt is not after its startsAt, creating nothing', async () => {
      await unchangedBy(
        () =>
          request(
            'POST',
            '/admin/products',
            { name: 'x', stock: 1, segments: 1, startsAt: '2030-01-02T00:00:00Z', endsAt: '2030-01-01T00:00:00Z' },
            admin,
          ),
        400,
        'VALIDATION_FAILED',
      );
    });
  });

  describe('OpenAPI', () => {
    it('should document the lifecycle calls with their bodies and error codes', async () => {
      const doc = (await request('GET', '/docs-json')).body;
      expect(Object.keys(doc.paths['/orders/{id}/pay'])).toEqual(['post']);
      expect(Object.keys(doc.paths['/orders/{id}/cancel'])).toEqual(['post']);
      expect(Object.keys(doc.paths['/admin/products/{id}/restock'])).toEqual(['post']);
      expect(Object.keys(doc.paths['/admin/products/{id}'])).toEqual(expect.arrayContaining(['get', 'patch']));
      expect(JSON.stringify(doc.paths['/orders/{id}/pay'].post.responses)).toMatch(
        /ORDER_EXPIRED.*ORDER_CANCELLED|ORDER_CANCELLED.*ORDER_EXPIRED/,
      );
      expect(JSON.stringify(doc.paths['/orders'].post.responses)).toMatch(/SALE_NOT_STARTED/);
      expect(doc.components.schemas.OrderOwnerDto.required).toEqual(['userId']);
      expect(Object.keys(doc.components.schemas.UpdateProductDto.properties).sort()).toEqual([
        'admissionTtlS',
        'continueUrl',
        'endsAt',
        'limitPerUser',
        'name',
        'paymentTimeoutS',
        'proofOfWork',
        'startsAt',
        'waitingRoom',
      ]);
      expect(doc.components.schemas.RestockDto.required).toEqual(['units']);
    });
  });
});
