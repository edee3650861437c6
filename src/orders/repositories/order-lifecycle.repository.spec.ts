// Pay and cancel against a fake DataSource: they answer from what their UPDATE returned, and
// refuse by what the order is now when the UPDATE changed nothing.
import { DatabaseConfig, HttpConfig } from '../../config/app-config';
import { OrderCancelledError, OrderExpiredError, OrderNotFoundError } from '../../common/domain-errors';
import { OrderLifecycleRepository } from './order-lifecycle.repository';
import { OutcomesRepository } from './outcomes.repository';

function repo(query: jest.Mock, runnerQuery: jest.Mock = jest.fn()) {
  const db = {
    query,
    createQueryRunner: () => ({
      query: runnerQuery,
      release: jest.fn(async () => undefined),
      databaseConnection: { end: jest.fn(async () => undefined) },
    }),
  };
  const metrics = { dependencyErrors: { inc: jest.fn() } };
  const http = { retryAfterS: 2 } as HttpConfig;
  const outcomes = new OutcomesRepository(db as never, { timeoutMs: 300 } as DatabaseConfig, http, metrics as never);
  return new OrderLifecycleRepository(db as never, http, metrics as never, outcomes);
}

describe('OrderLifecycleRepository', () => {
  // TypeORM's PostgreSQL driver answers an UPDATE (RETURNING or not) as [rows, affected count] and
  // anything else as the rows: the fakes below answer in the same shapes.
  describe('pay and cancel read what their UPDATE returned', () => {
    const record = (status: string, open = true) => ({
      id: '41',
      product_id: 7,
      user_id: 'u1',
      quantity: 1,
      allocations: [{ segment: 2, quantity: 1 }],
      status,
      created_at: new Date(),
      expires_at: new Date(),
      paid_at: status === 'paid' ? new Date() : null,
      closed_at: status === 'cancelled' || status === 'expired' ? new Date() : null,
      open,
    });
    /** The UPDATE of a pay matches `updated` rows; the lookup after a miss finds `found`. */
    const payQuery = (updated: object[], found: object[]) =>
      jest.fn(async (sql: string) => (sql.includes('UPDATE orders') ? [updated, updated.length] : found));

    it('should answer the paid order when the UPDATE paid it', async () => {
      const r = repo(payQuery([record('paid')], []));
      await expect(r.pay('41', 'u1')).resolves.toMatchObject({
        order: { id: 41, userId: 'u1', status: 'paid' },
        changed: true,
      });
    });

    it('should refuse a payment that the UPDATE did not take, by what the order is now', async () => {
      await expect(repo(payQuery([], [record('cancelled')])).pay('41', 'u1')).rejects.toBeInstanceOf(
        OrderCancelledError,
      );
      await expect(repo(payQuery([], [record('expired')])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderExpiredError);
      await expect(repo(payQuery([], [record('reserved', false)])).pay('41', 'u1')).rejects.toBeInstanceOf(
        OrderExpiredError,
      );
      await expect(repo(payQuery([], [])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderNotFoundError);
      await expect(repo(payQuery([], [record('paid')])).pay('41', 'u1')).resolves.toMatchObject({
        order: { id: 41, status: 'paid' },
        changed: false,
      });
    });

    it('should answer the cancelled order with its id when the cancel took it', async () => {
      const runner = jest.fn(async (sql: string) => {
        if (sql.includes('SELECT product_id, user_id')) return [{ product_id: 7, user_id: 'u1' }];
        if (sql.includes('FROM products')) return [{ layout_version: 1, segment_count: 4 }];
        if (sql.includes('FROM orders WHERE id = $1 FOR UPDATE')) return [record('reserved')];
        if (sql.includes('UPDATE stock_segments')) return [{ n: 1 }];
        if (sql.includes('UPDATE orders')) return [[record('cancelled')], 1];
        return [];
      });
      const done = await repo(jest.fn(), runner).cancel('41', 'u1');
      expect(done.order).toMatchObject({ id: 41, userId: 'u1', status: 'cancelled' });
      expect(done.returned).toEqual({ productId: 7, layoutVersion: 1, segments: [2], units: 1 });
    });
  });
  // TypeORM answers an UPDATE with [rows returned, rows affected]; the fakes below do the same.
  describe('pay and cancel read what their UPDATE returned', () => {
    const record = (status: string, extra: Record<string, unknown> = {}) => ({
      id: '41',
      product_id: 7,
      user_id: 'u1',
      quantity: 1,
      allocations: [{ segment: 3, quantity: 1 }],
      status,
      created_at: new Date(),
      expires_at: new Date(Date.now() + 60_000),
      paid_at: status === 'paid' ? new Date() : null,
      closed_at: status === 'cancelled' || status === 'expired' ? new Date() : null,
      ...extra,
    });
    /** PostgreSQL as the one UPDATE of pay finds it: `updated` is what it changed (nothing, or the order now paid). */
    const payDb = (updated: object[], found: object[]) =>
      jest.fn(async (sql: string) => (sql.includes('UPDATE') ? [updated, updated.length] : found));

    it('should answer the paid order when the UPDATE paid it', async () => {
      const paid = record('paid');
      await expect(repo(payDb([paid], [paid])).pay('41', 'u1')).resolves.toMatchObject({
        order: { id: 41, status: 'paid' },
        changed: true,
      });
    });

    it('should refuse, not answer 200, when the UPDATE changed nothing', async () => {
      await expect(repo(payDb([], [record('cancelled')])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderCancelledError);
      await expect(repo(payDb([], [record('expired')])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderExpiredError);
      await expect(repo(payDb([], [record('reserved', { open: false })])).pay('41', 'u1')).rejects.toBeInstanceOf(
        OrderExpiredError,
      );
      await expect(repo(payDb([], [record('reserved', { user_id: 'u2' })])).pay('41', 'u1')).rejects.toBeInstanceOf(
        OrderNotFoundError,
      );
      await expect(repo(payDb([], [])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderNotFoundError);
    });

    it('should answer the cancelled order as the UPDATE returned it, with the units it put back', async () => {
      const runner = jest.fn(async (sql: string) => {
        if (sql.includes('SELECT product_id, user_id')) return [{ product_id: 7, user_id: 'u1' }];
        if (sql.includes('FROM products')) return [{ layout_version: 1, segment_count: 4 }];
        if (sql.includes('FROM orders WHERE id = $1 FOR UPDATE')) return [record('reserved', { open: true })];
        if (sql.includes('UPDATE stock_segments')) return [{ n: 1 }];
        if (sql.includes('UPDATE orders')) return [[record('cancelled')], 1];
        return [];
      });
      await expect(repo(jest.fn(), runner).cancel('41', 'u1')).resolves.toMatchObject({
        order: { id: 41, status: 'cancelled', userId: 'u1' },
        returned: { productId: 7, segments: [3], units: 1 },
      });
    });
  });
});
