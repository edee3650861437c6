// Direct access to the test run's PostgreSQL and Redis, to reset them and to check invariants.
import Redis from 'ioredis';
import { Client } from 'pg';
import { testUrls } from './service';

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

export interface StockAudit {
  totalStock: number;
  remaining: number;
  ordered: number;
  negativeSegments: number;
  orders: number;
  duplicateUsers: number;
}

/** I1 and I2 read from PostgreSQL: stocked vs remaining + ordered, negative segments, users twice. */
export async function auditProduct(productId: number): Promise<StockAudit> {
  return withDb(async (db) => {
    const { rows } = await db.query(
      `SELECT p.total_stock::bigint AS total_stock,
              (SELECT COALESCE(sum(stock), 0) FROM stock_segments WHERE product_id = p.id)::bigint AS remaining,
              (SELECT COALESCE(sum(quantity), 0) FROM orders WHERE product_id = p.id)::bigint AS ordered,
              (SELECT count(*) FROM stock_segments WHERE product_id = p.id AND stock < 0)::int AS negative_segments,
              (SELECT count(*) FROM orders WHERE product_id = p.id)::int AS orders,
              (SELECT count(*) FROM (SELECT user_id FROM orders WHERE product_id = p.id GROUP BY user_id HAVING count(*) > 1) d)::int AS duplicate_users
         FROM products p WHERE p.id = $1`,
      [productId],
    );
    const r = rows[0];
    return {
      totalStock: Number(r.total_stock),
      remaining: Number(r.remaining),
      ordered: Number(r.ordered),
      negativeSegments: r.negative_segments,
      orders: r.orders,
      duplicateUsers: r.duplicate_users,
    };
  });
}
