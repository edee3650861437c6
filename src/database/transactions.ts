// How a repository runs a transaction by hand (a QueryRunner, not DataSource.transaction): so that a
// COMMIT that lost its reply can be told apart from any other failure, since only it may have
// committed, and so that a session whose transaction may still be open never goes back to the pool.
import { DataSource, QueryRunner } from 'typeorm';
import { writeFailure } from '../common/database-errors';

/**
 * What TypeORM's query() answers for an UPDATE (or DELETE), RETURNING or not: the rows returned and
 * the number of rows affected, not the rows alone as for a SELECT or an INSERT.
 */
export type Updated<T> = [T[], number];

/** What the caller makes of a transaction: its COMMIT statement, and its two kinds of failure. */
export interface TransactionTerms {
  /** The COMMIT to send; the caller tags it so that a lost reply can be looked up in pg_stat_activity. */
  commit: string;
  /** The error for a COMMIT whose reply was lost: it may have committed. */
  uncertain: (err: unknown) => Error;
  /** Any other failure as the caller answers it. The transaction did not commit. */
  mapped: (err: unknown) => unknown;
}

/**
 * A transaction whose COMMIT alone can be uncertain: a failure before it leaves the transaction
 * uncommitted (PostgreSQL rolls back what a lost session left open), so it maps as usual.
 */
export async function inTransaction<T>(
  db: DataSource,
  terms: TransactionTerms,
  work: (tx: QueryRunner) => Promise<T>,
): Promise<T> {
  let runner: QueryRunner | undefined;
  let committing = false;
  // A session whose transaction may still be open must never go back to the pool: the next
  // borrower's statements would run inside that transaction and be rolled back with it, after
  // their callers were told they succeeded. (pg drops a queued ROLLBACK whose read timeout fires
  // before it was sent, e.g. behind a statement stuck in a frozen PostgreSQL.)
  let poisoned = false;
  try {
    runner = db.createQueryRunner();
    await runner.query('START TRANSACTION');
    const result = await work(runner);
    committing = true;
    await runner.query(terms.commit);
    return result;
  } catch (err) {
    if (runner && !committing) {
      await runner.query('ROLLBACK').catch(() => {
        poisoned = true;
      });
    }
    if (committing && writeFailure(err) !== 'rejected') poisoned = true;
    if (committing && writeFailure(err) === 'unknown') throw terms.uncertain(err);
    throw terms.mapped(err);
  } finally {
    if (poisoned) endSession(runner);
    await runner?.release();
  }
}

/**
 * Ends the query runner's PostgreSQL session (the server rolls back whatever it left open); pg-pool
 * then drops the client on release instead of lending it again.
 */
function endSession(runner: QueryRunner | undefined): void {
  const client = (runner as unknown as { databaseConnection?: { end(): Promise<void> } } | undefined)
    ?.databaseConnection;
  client?.end().catch(() => undefined);
}
