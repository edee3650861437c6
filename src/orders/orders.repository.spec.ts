// The order SQL's failure handling against a fake DataSource: which failures are settled by the
// order's key, and what settling answers.
import { QueryFailedError } from 'typeorm';
import { DatabaseConfig, HttpConfig } from '../config/app-config';
import {
  AlreadyOrderedError,
  OrderCancelledError,
  OrderExpiredError,
  OrderNotFoundError,
  OutcomeUnknownError,
  UnavailableError,
} from '../common/domain-errors';
import { OrdersRepository, UncertainWrite } from './orders.repository';

const terminated = () => new QueryFailedError('...', [], new Error('Connection terminated unexpectedly'));
const refused = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });

/** The session under the fake query runner: ended (dropped by the pool) or lent again. */
const session = { end: jest.fn(async () => undefined) };

function repo(query: jest.Mock, runnerQuery: jest.Mock = jest.fn()) {
  const db = { query, createQueryRunner: () => ({ query: runnerQuery, release: jest.fn(async () => undefined), databaseConnection: session }) };
  const metrics = { dependencyErrors: { inc: jest.fn() }, batchRetries: { inc: jest.fn() } };
  return new OrdersRepository(db as never, { timeoutMs: 300 } as DatabaseConfig, { retryAfterS: 2 } as HttpConfig, metrics as never);
}
const order = (ageMs: number, segment = 3) => ({
  id: '41',
  product_id: 7,
  user_id: 'u1',
  quantity: 1,
  allocations: [{ segment, quantity: 1 }],
  created_at: new Date(),
  age_ms: ageMs,
});
/** A two-segment sale whose statements all succeed and whose COMMIT loses its reply. */
const commitLosesItsReply = () =>
  jest.fn(async (sql: string) => {
    if (sql.includes('FOR UPDATE'))
      return [
        { idx: 1, stock: '1' },
        { idx: 2, stock: '1' },
      ];
    if (sql.includes('INSERT')) return [{ id: '5', created_at: new Date() }];
    if (sql.includes('COMMIT')) throw terminated();
    return [[], 1];
  });
const write = () => new UncertainWrite(7, 'u1', 1, [3], 'tag', process.hrtime.bigint() - 50_000_000n, new Error('lost'));

describe('OrdersRepository', () => {
  describe('a group-commit statement refused by CHECK (stock >= 0)', () => {
    const checkViolation = () => new QueryFailedError('...', [], Object.assign(new Error('violates check constraint'), { code: '23514', severity: 'ERROR' }));
    const soldRows = [
      { kind: 'sold', user_id: 'u1', id: '9', created_at: new Date(), expires_at: new Date(), stock: null },
      { kind: 'chosen', user_id: 'u1', id: null, created_at: null, expires_at: null, stock: null },
      { kind: 'left', user_id: null, id: null, created_at: null, expires_at: null, stock: '4' },
    ];

    it('should run it again in a transaction that locks the segment row in a statement of its own first', async () => {
      const runner = jest.fn(async (sql: string) => (sql.includes('SELL') || sql.includes('unnest') ? soldRows : []));
      const r = repo(jest.fn().mockRejectedValue(checkViolation()), runner);
      const out = await r.sellBatch(7, 3, [{ userId: 'u1', quantity: 1 }]);
      expect(out.results[0]).toMatchObject({ order: { id: 9, userId: 'u1', status: 'reserved' } });
      expect(out.remaining).toBe(4);
      const sqls = runner.mock.calls.map(([sql]) => sql);
      const lock = sqls.findIndex((q) => /^SELECT 1 FROM stock_segments .* FOR UPDATE$/.test(q));
      const batch = sqls.findIndex((q) => q.includes('unnest'));
      expect(sqls[0]).toBe('START TRANSACTION');
      expect(lock).toBeGreaterThan(0);
      expect(batch).toBeGreaterThan(lock);
      expect(sqls[sqls.length - 1]).toMatch(/COMMIT$/);
    });

    it('should answer BUSY, nothing written, when the locked retry is refused too', async () => {
      const runner = jest.fn(async (sql: string) => {
        if (sql.includes('unnest')) throw checkViolation();
        return [];
      });
      const r = repo(jest.fn().mockRejectedValue(checkViolation()), runner);
      await expect(r.sellBatch(7, 3, [{ userId: 'u1', quantity: 1 }])).rejects.toMatchObject({ code: 'BUSY' });
      expect(runner.mock.calls.map(([sql]) => sql)).toContain('ROLLBACK');
    });
  });

  describe('which failures of a sale are uncertain', () => {
    it('should throw UncertainWrite when the connection breaks during the one-statement sale', async () => {
      const r = repo(jest.fn().mockRejectedValue(terminated()));
      await expect(r.sellFromSegment(7, 3, 1, 'u1')).rejects.toBeInstanceOf(UncertainWrite);
    });

    it('should answer UNAVAILABLE when the sale never reached PostgreSQL', async () => {
      const r = repo(jest.fn().mockRejectedValue(refused()));
      await expect(r.sellFromSegment(7, 3, 1, 'u1')).rejects.toBeInstanceOf(UnavailableError);
    });

    it('should answer UNAVAILABLE when the connection breaks inside the transaction before COMMIT', async () => {
      const runner = jest.fn(async (sql: string) => {
        if (sql.includes('FOR UPDATE')) throw terminated();
        return [];
      });
      await expect(repo(jest.fn(), runner).sellFromSegments(7, [1, 2], 2, 'u1')).rejects.toBeInstanceOf(UnavailableError);
    });

    it('should throw UncertainWrite when the connection breaks during COMMIT of the several-segment sale', async () => {
      const runner = commitLosesItsReply();
      const err = await repo(jest.fn(), runner)
        .sellFromSegments(7, [1, 2], 2, 'u1')
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(UncertainWrite);
      expect((err as UncertainWrite).segments).toEqual([1, 2]);
    });
  });

  describe('a transaction that may still be open never goes back to the pool', () => {
    beforeEach(() => session.end.mockClear());

    it('should end the session when its ROLLBACK fails after a failed statement', async () => {
      const runner = jest.fn(async (sql: string) => {
        if (sql.includes('FOR UPDATE') || sql === 'ROLLBACK') throw new QueryFailedError(sql, [], new Error('Query read timeout'));
        return [];
      });
      await expect(repo(jest.fn(), runner).sellFromSegments(7, [1, 2], 2, 'u1')).rejects.toBeInstanceOf(UnavailableError);
      expect(session.end).toHaveBeenCalledTimes(1);
    });

    it('should end the session when COMMIT lost its reply', async () => {
      const runner = commitLosesItsReply();
      await expect(repo(jest.fn(), runner).sellFromSegments(7, [1, 2], 2, 'u1')).rejects.toBeInstanceOf(UncertainWrite);
      expect(session.end).toHaveBeenCalledTimes(1);
    });

    it('should lend the session again after a clean ROLLBACK', async () => {
      const runner = jest.fn(async (sql: string) => {
        if (sql.includes('FOR UPDATE')) throw terminated();
        return [];
      });
      await expect(repo(jest.fn(), runner).sellFromSegments(7, [1, 2], 2, 'u1')).rejects.toBeInstanceOf(UnavailableError);
      expect(session.end).not.toHaveBeenCalled();
    });
  });

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
      await expect(r.pay('41', 'u1')).resolves.toMatchObject({ order: { id: 41, userId: 'u1', status: 'paid' }, changed: true });
    });

    it('should refuse a payment that the UPDATE did not take, by what the order is now', async () => {
      await expect(repo(payQuery([], [record('cancelled')])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderCancelledError);
      await expect(repo(payQuery([], [record('expired')])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderExpiredError);
      await expect(repo(payQuery([], [record('reserved', false)])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderExpiredError);
      await expect(repo(payQuery([], [])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderNotFoundError);
      await expect(repo(payQuery([], [record('paid')])).pay('41', 'u1')).resolves.toMatchObject({ order: { id: 41, status: 'paid' }, changed: false });
    });

    it('should answer the cancelled order with its id when the cancel took it', async () => {
      const runner = jest.fn(async (sql: string) => {
        if (sql.includes('SELECT product_id, user_id')) return [{ product_id: 7, user_id: 'u1' }];
        if (sql.includes('FROM products')) return [{ layout_version: 1, segment_count: 4 }];
        if (sql.includes('FROM orders WHERE id = $1 FOR UPDATE')) return [record('reserved')];
        if (sql.includes('UPDATE stock_segments')) return [[], 1];
        if (sql.includes('UPDATE orders')) return [[record('cancelled')], 1];
        return [];
      });
      const done = await repo(jest.fn(), runner).cancel('41', 'u1');
      expect(done.order).toMatchObject({ id: 41, userId: 'u1', status: 'cancelled' });
      expect(done.returned).toEqual({ productId: 7, layoutVersion: 1, segments: [2], units: 1 });
    });
  });

  describe('settle', () => {
    it('should answer the order when one created since the write was sent exists', async () => {
      const query = jest
        .fn()
        .mockResolvedValueOnce([{ running: 0 }])
        .mockResolvedValueOnce([order(10)]);
      await expect(repo(query).settle(write())).resolves.toMatchObject({ id: 41, userId: 'u1' });
    });

    it('should answer ALREADY_ORDERED with its id for an order older than the write', async () => {
      const query = jest
        .fn()
        .mockResolvedValueOnce([{ running: 0 }])
        .mockResolvedValueOnce([order(60_000)]);
      const err = await repo(query)
        .settle(write())
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(AlreadyOrderedError);
      expect((err as AlreadyOrderedError).orderId).toBe(41);
    });

    it('should answer UNAVAILABLE when nothing of the write runs any more and no order exists', async () => {
      const query = jest
        .fn()
        .mockResolvedValueOnce([{ running: 0 }])
        .mockResolvedValueOnce([]);
      await expect(repo(query).settle(write())).rejects.toBeInstanceOf(UnavailableError);
    });

    it('should retry while PostgreSQL is away and settle once it answers', async () => {
      const query = jest
        .fn()
        .mockRejectedValueOnce(refused())
        .mockResolvedValueOnce([{ running: 0 }])
        .mockResolvedValueOnce([order(10)]);
      await expect(repo(query).settle(write())).resolves.toMatchObject({ id: 41 });
    });

    it('should answer OUTCOME_UNKNOWN when the write still runs or PostgreSQL stays away for DB_TIMEOUT_MS', async () => {
      for (const query of [jest.fn().mockResolvedValue([{ running: 1 }]), jest.fn().mockRejectedValue(refused())]) {
        const started = Date.now();
        const err = await repo(query)
          .settle(write())
          .catch((e: unknown) => e);
        expect(err).toBeInstanceOf(OutcomeUnknownError);
        expect((err as OutcomeUnknownError).retryAfterS).toBe(2);
        expect(Date.now() - started).toBeGreaterThanOrEqual(290);
      }
    });

    it('should give up at DB_TIMEOUT_MS on a lookup that hangs', async () => {
      const started = Date.now();
      await expect(repo(jest.fn(() => new Promise(() => undefined))).settle(write())).rejects.toBeInstanceOf(OutcomeUnknownError);
      expect(Date.now() - started).toBeLessThan(1000);
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
    const payDb = (updated: object[], found: object[]) => jest.fn(async (sql: string) => (sql.includes('UPDATE') ? [updated, updated.length] : found));

    it('should answer the paid order when the UPDATE paid it', async () => {
      const paid = record('paid');
      await expect(repo(payDb([paid], [paid])).pay('41', 'u1')).resolves.toMatchObject({ order: { id: 41, status: 'paid' }, changed: true });
    });

    it('should refuse, not answer 200, when the UPDATE changed nothing', async () => {
      await expect(repo(payDb([], [record('cancelled')])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderCancelledError);
      await expect(repo(payDb([], [record('expired')])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderExpiredError);
      await expect(repo(payDb([], [record('reserved', { open: false })])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderExpiredError);
      await expect(repo(payDb([], [record('reserved', { user_id: 'u2' })])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderNotFoundError);
      await expect(repo(payDb([], [])).pay('41', 'u1')).rejects.toBeInstanceOf(OrderNotFoundError);
    });

    it('should answer the cancelled order as the UPDATE returned it, with the units it put back', async () => {
      const runner = jest.fn(async (sql: string) => {
        if (sql.includes('SELECT product_id, user_id')) return [{ product_id: 7, user_id: 'u1' }];
        if (sql.includes('FROM products')) return [{ layout_version: 1, segment_count: 4 }];
        if (sql.includes('FROM orders WHERE id = $1 FOR UPDATE')) return [record('reserved', { open: true })];
        if (sql.includes('UPDATE stock_segments')) return [[], 1];
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
