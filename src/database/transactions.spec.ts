// inTransaction against a fake query runner: a session whose transaction may still be open is
// ended, never lent again, and only a COMMIT that lost its reply is answered as uncertain.
import { QueryFailedError, QueryRunner } from 'typeorm';
import { mapDatabaseError } from '../common/database-errors';
import { UnavailableError } from '../common/domain-errors';
import { inTransaction, TransactionTerms } from './transactions';

const terminated = () => new QueryFailedError('...', [], new Error('Connection terminated unexpectedly'));

/** The session under the fake query runner: ended (dropped by the pool) or lent again. */
const session = { end: jest.fn(async () => undefined) };

class Uncertain extends Error {}

const terms: TransactionTerms = {
  commit: '/* tagged */ COMMIT',
  uncertain: (err) => new Uncertain('maybe committed', { cause: err }),
  mapped: (err) => mapDatabaseError(err, 2),
};

/** Runs a transaction of one locking read and one write over a runner whose statements answer by `runnerQuery`. */
function run(runnerQuery: jest.Mock) {
  const db = {
    createQueryRunner: () => ({
      query: runnerQuery,
      release: jest.fn(async () => undefined),
      databaseConnection: session,
    }),
  };
  return inTransaction(db as never, terms, async (tx: QueryRunner) => {
    await tx.query('SELECT idx, stock FROM stock_segments WHERE product_id = $1 FOR UPDATE', [7]);
    await tx.query('UPDATE stock_segments SET stock = stock - 1 WHERE product_id = $1', [7]);
    return 'done';
  });
}

describe('inTransaction: a transaction that may still be open never goes back to the pool', () => {
  beforeEach(() => session.end.mockClear());

  it('should end the session when its ROLLBACK fails after a failed statement', async () => {
    const runner = jest.fn(async (sql: string) => {
      if (sql.includes('FOR UPDATE') || sql === 'ROLLBACK')
        throw new QueryFailedError(sql, [], new Error('Query read timeout'));
      return [];
    });
    await expect(run(runner)).rejects.toBeInstanceOf(UnavailableError);
    expect(session.end).toHaveBeenCalledTimes(1);
  });

  it('should end the session and answer uncertain when COMMIT lost its reply', async () => {
    const runner = jest.fn(async (sql: string) => {
      if (sql.includes('COMMIT')) throw terminated();
      return [];
    });
    await expect(run(runner)).rejects.toBeInstanceOf(Uncertain);
    expect(runner.mock.calls.map(([sql]) => sql)).toContain('/* tagged */ COMMIT');
    expect(session.end).toHaveBeenCalledTimes(1);
  });

  it('should lend the session again after a clean ROLLBACK, the failure answered as mapped', async () => {
    const runner = jest.fn(async (sql: string) => {
      if (sql.includes('FOR UPDATE')) throw terminated();
      return [];
    });
    await expect(run(runner)).rejects.toBeInstanceOf(UnavailableError);
    expect(runner.mock.calls.map(([sql]) => sql)).toContain('ROLLBACK');
    expect(session.end).not.toHaveBeenCalled();
  });
});
