// Direct access to the test run's PostgreSQL and Redis, to reset them and to check invariants.
import Redis from 'ioredis';
import { Client } from 'pg';
import { Audit, auditProduct as audit } from '../../bench/verify';
import { testUrls } from './service';

export type StockAudit = Audit;

export async function withDb<T>(work: (db: Client) => Promise<T>): Promise<T> {
  const db = new Client({ connectionString: testUrls().databaseUrl });
  await db.connect();
  try {
    return await work(db);
  } finally {
    await db.end();
  }
}

/** Empties every table and the Redis database between specs. */
export async function resetState(): Promise<void> {
  await withDb((db) => db.query('TRUNCATE orders, stock_segments, products RESTART IDENTITY CASCADE'));
  const redis = new Redis(testUrls().redisUrl);
  try {
    await redis.flushall();
  } finally {
    redis.disconnect();
  }
}

/** I1 and I2 read from PostgreSQL (the benchmark's audit): stocked vs remaining + ordered, negative segments, users twice. */
export function auditProduct(productId: number): Promise<StockAudit> {
  return withDb((db) => audit(db, productId));
}

/** I1 and I2 from one snapshot: remaining + ordered == `stocked` units, no segment below 0, no user twice. */
export async function expectStockBalanced(productId: number, stocked: number): Promise<StockAudit> {
  const books = await auditProduct(productId);
  expect({ ...books, balanced: books.remaining + books.ordered }).toEqual({
    ...books,
    totalStock: stocked,
    balanced: stocked,
    negativeSegments: 0,
    duplicateUsers: 0,
  });
  return books;
}

/** Orders of a product by status (reserved, paid, cancelled, expired), as PostgreSQL has them now. */
export async function countByStatus(db: Client, productId: number): Promise<Record<string, number>> {
  const { rows } = await db.query('SELECT status, count(*)::int AS n FROM orders WHERE product_id = $1 GROUP BY status', [productId]);
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}
