// A product straight in PostgreSQL, for runs of the peers without a service to call
// POST /admin/products on. The service's admin API makes the same rows; either will do.
import { Client } from 'pg';

/** Inserts the product and its segments (the stock spread evenly, the first ones one unit larger); returns its id. */
export async function insertProduct(
  db: Client,
  p: { name: string; stock: number; segments: number; limitPerUser?: number },
): Promise<number> {
  const { rows } = await db.query(
    `WITH p AS (
       INSERT INTO products (name, total_stock, segment_count, limit_per_user) VALUES ($1, $2::int, $3::int, $4::int) RETURNING id
     ), s AS (
       INSERT INTO stock_segments (product_id, idx, stock)
       SELECT p.id, i, $2::int / $3::int + CASE WHEN i < $2::int % $3::int THEN 1 ELSE 0 END FROM p, generate_series(0, $3::int - 1) AS i
     )
     SELECT id FROM p`,
    [p.name, p.stock, p.segments, p.limitPerUser ?? 1],
  );
  return rows[0].id as number;
}
