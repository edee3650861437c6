// The sale SQL's failure handling against a fake DataSource: which failures of a sale are
// uncertain (thrown for settling), and how a group-commit statement refused by CHECK is retried.
import { QueryFailedError } from 'typeorm';
import { HttpConfig } from '../../config/app-config';
import { UnavailableError } from '../../common/domain-errors';
import { UncertainWrite } from '../order.types';
import { SaleWritesRepository } from './sale-writes.repository';

const terminated = () => new QueryFailedError('...', [], new Error('Connection terminated unexpectedly'));
const refused = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });

function repo(query: jest.Mock, runnerQuery: jest.Mock = jest.fn()) {
  const db = {
    query,
    createQueryRunner: () => ({
      query: runnerQuery,
      release: jest.fn(async () => undefined),
      databaseConnection: { end: jest.fn(async () => undefined) },
    }),
  };
  const metrics = { dependencyErrors: { inc: jest.fn() }, batchRetries: { inc: jest.fn() } };
  return new SaleWritesRepository(db as never, { retryAfterS: 2 } as HttpConfig, metrics as never);
}
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

describe('SaleWritesRepository', () => {
  describe('a group-commit statement refused by CHECK (stock >= 0)', () => {
    const checkViolation = () =>
      new QueryFailedError(
        '...',
        [],
        Object.assign(new Error('violates check constraint'), { code: '23514', severity: 'ERROR' }),
      );
    const soldRows = [
      { kind: 'sold', user_id: 'u1', id: '9', created_at: new Date(), expires_at: new Date(), stock: null },
      { kind: 'chosen', user_id: 'u1', id: null, created_at: null, expires_at: null, stock: null },
      { kind: 'left', user_id: null, id: null, created_at: null, expires_at: null, stock: '4' },
    ];

    it('should run it again in a transaction that locks the segment row in a statement of its own first', async () => {
      const runner = jest.fn(async (sql: string) => (sql.includes('SELL') || sql.includes('unnest') ? soldRows : []));
      const r = repo(jest.fn().mockRejectedValue(checkViolation()), runner);
      const out = await r.sellBatch(7, 3, 1, [{ userId: 'u1', quantity: 1 }]);
      if (out.kind !== 'decided') throw new Error(`decided expected, got ${out.kind}`);
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
      await expect(r.sellBatch(7, 3, 1, [{ userId: 'u1', quantity: 1 }])).rejects.toMatchObject({ code: 'BUSY' });
      expect(runner.mock.calls.map(([sql]) => sql)).toContain('ROLLBACK');
    });
  });

  describe('which failures of a sale are uncertain', () => {
    it('should throw UncertainWrite when the connection breaks during the one-statement sale', async () => {
      const r = repo(jest.fn().mockRejectedValue(terminated()));
      await expect(r.sellFromSegment(7, 3, 1, 1, 'u1')).rejects.toBeInstanceOf(UncertainWrite);
    });

    it('should answer UNAVAILABLE when the sale never reached PostgreSQL', async () => {
      const r = repo(jest.fn().mockRejectedValue(refused()));
      await expect(r.sellFromSegment(7, 3, 1, 1, 'u1')).rejects.toBeInstanceOf(UnavailableError);
    });

    it('should answer UNAVAILABLE when the connection breaks inside the transaction before COMMIT', async () => {
      const runner = jest.fn(async (sql: string) => {
        if (sql.includes('FOR UPDATE')) throw terminated();
        return [];
      });
      await expect(repo(jest.fn(), runner).sellFromSegments(7, [1, 2], [1, 1], 2, 'u1')).rejects.toBeInstanceOf(
        UnavailableError,
      );
    });

    it('should throw UncertainWrite when the connection breaks during COMMIT of the several-segment sale', async () => {
      const runner = commitLosesItsReply();
      const err = await repo(jest.fn(), runner)
        .sellFromSegments(7, [1, 2], [1, 1], 2, 'u1')
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(UncertainWrite);
      expect((err as UncertainWrite).segments).toEqual([1, 2]);
    });
  });
});
