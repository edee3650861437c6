// Direct access to the test run's PostgreSQL and Redis, to reset them and to check invariants.
import Redis from 'ioredis';
import { Client } from 'pg';
import { Audit, auditProduct as audit } from '../../harness/verify';
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
  await withDb(async (db) => {
    await db.query(
      'TRUNCATE orders, stock_segments, products, order_events, webhook_dead_letters, queue_tickets, queue_counts RESTART IDENTITY CASCADE',
    );
    await db.query(`DELETE FROM event_marks WHERE name <> 'pruned'`);
    await db.query(`UPDATE event_marks SET tx = '0', id = 0`);
  });
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
  const { rows } = await db.query(
    'SELECT status, count(*)::int AS n FROM orders WHERE product_id = $1 GROUP BY status',
    [productId],
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

/**
 * Statements PostgreSQL has run in the test database so far (pg_stat_statements, loaded by the
 * global setup; its counts are exact at once, unlike pg_stat_database's), leaving out these reads
 * and, with `except`, the statements whose text holds it.
 */
export async function statementCount(opts: { except?: string | string[] } = {}): Promise<number> {
  let n = 0;
  for (const calls of (await statementCalls(opts)).values()) n += calls;
  return n;
}

/** statementCount() by statement text, to name what ran when a count is off. */
export async function statementCalls(opts: { except?: string | string[] } = {}): Promise<Map<string, number>> {
  const except = opts.except === undefined ? [] : ([] as string[]).concat(opts.except);
  return withDb(async (db) => {
    await db.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    const { rows } = await db.query<{ query: string; n: string }>(
      `SELECT s.query, sum(s.calls)::text AS n
         FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
        WHERE d.datname = current_database() AND s.query NOT ILIKE '%pg_stat_statements%'
          AND NOT EXISTS (SELECT 1 FROM unnest($1::text[]) AS e(text) WHERE strpos(s.query, e.text) > 0)
        GROUP BY s.query`,
      [except],
    );
    return new Map(rows.map((r) => [r.query, Number(r.n)]));
  });
}

/** What ran between two statementCalls() or redisCommandCalls() readings, with how many times each ran. */
export function callsBetween(before: Map<string, number>, after: Map<string, number>): Record<string, number> {
  const ran: Record<string, number> = {};
  for (const [query, n] of after) if (n > (before.get(query) ?? 0)) ran[query] = n - (before.get(query) ?? 0);
  return ran;
}

/** Probes, health checks and connection set-up (this reader's own among them), left out of the counts. */
const NOT_COUNTED = new Set(['info', 'ping', 'client', 'hello', 'select', 'auth']);

/** Commands the Redis at `url` has run (INFO commandstats), leaving out NOT_COUNTED. */
export async function redisCommandCount(url = testUrls().redisUrl): Promise<number> {
  let n = 0;
  for (const calls of (await redisCommandCalls(url)).values()) n += calls;
  return n;
}

/** redisCommandCount() by command (a subcommand as `command|sub`), to name what ran when a count is off. */
export async function redisCommandCalls(url = testUrls().redisUrl): Promise<Map<string, number>> {
  const redis = new Redis(url);
  try {
    const text = await redis.info('commandstats');
    const calls = new Map<string, number>();
    for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm))
      if (!NOT_COUNTED.has(m[1].split('|')[0])) calls.set(m[1], Number(m[2]));
    return calls;
  } finally {
    redis.disconnect();
  }
}

/** A product with the given segment sizes, written straight into the tables (for specs of the SQL alone). */
export async function productWithSegments(segments: number[], name = 'segments'): Promise<number> {
  return withDb(async (c) => {
    const total = segments.reduce((a, b) => a + b, 0);
    const { rows } = await c.query<{ id: number }>(
      `INSERT INTO products (name, total_stock, limit_per_user, segment_count) VALUES ($1, $2, 5, $3) RETURNING id`,
      [name, total, segments.length],
    );
    const id = rows[0].id;
    for (const [idx, stock] of segments.entries())
      await c.query('INSERT INTO stock_segments (product_id, idx, stock) VALUES ($1, $2, $3)', [id, idx, stock]);
    return id;
  });
}
