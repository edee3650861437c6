// Putting the units of closed orders (cancelled or expired) back into their segments, inside the
// transaction that closes them, so a unit comes back exactly when its order stops holding it; the
// event stream's units.returned is written by the same statement.
import { QueryRunner } from 'typeorm';
import { Allocation, ReturnedUnits } from '../order.types';
import { tagged } from './order-sql';

/**
 * The first step of every return of units: the product row FOR SHARE. A rebalance or a restock
 * takes it FOR NO KEY UPDATE, so a return never meets segments being rewritten (its UPDATE would
 * skip a row a rebalance deleted and lose the units); returns do not block each other or sales.
 * Null when the product is gone.
 */
export async function lockProductForReturns(
  tx: QueryRunner,
  productId: number,
): Promise<{ layoutVersion: number; segmentCount: number } | null> {
  const [p] = (await tx.query('SELECT layout_version, segment_count FROM products WHERE id = $1 FOR SHARE', [
    productId,
  ])) as Array<{
    layout_version: number;
    segment_count: number;
  }>;
  return p ? { layoutVersion: p.layout_version, segmentCount: p.segment_count } : null;
}

/**
 * Puts the units of orders (locked FOR UPDATE by the caller, whose status change follows in the
 * same transaction) back into the segments they came from, or into the smallest segment when a
 * rebalance removed theirs. The segment rows are locked in ascending order, like every multi-row
 * taker of this schema, so a return never deadlocks with a sale, another return or a sweep.
 */
export async function returnUnits(
  tx: QueryRunner,
  tag: string,
  productId: number,
  product: { layoutVersion: number; segmentCount: number },
  orders: Array<{ allocations: Allocation[] }>,
  reason: 'cancelled' | 'expired',
): Promise<ReturnedUnits> {
  const back = new Map<number, number>();
  let smallest: number | undefined;
  for (const order of orders) {
    for (const a of order.allocations) {
      let target = a.segment;
      if (target >= product.segmentCount) {
        if (smallest === undefined) {
          const [s] = (await tx.query(
            'SELECT idx FROM stock_segments WHERE product_id = $1 ORDER BY stock, idx LIMIT 1',
            [productId],
          )) as Array<{
            idx: number;
          }>;
          smallest = s.idx;
        }
        target = smallest;
      }
      back.set(target, (back.get(target) ?? 0) + a.quantity);
    }
  }
  const segments = [...back.keys()].sort((a, b) => a - b);
  const units = segments.map((i) => back.get(i) as number);
  await tx.query(
    'SELECT idx FROM stock_segments WHERE product_id = $1 AND idx = ANY($2::int[]) ORDER BY idx FOR UPDATE',
    [productId, segments],
  );
  // The units go back and the stream's units.returned event is written in one statement.
  const [{ n }] = (await tx.query(
    tagged(
      tag,
      `WITH back AS (
         UPDATE stock_segments s SET stock = s.stock + v.q FROM unnest($2::int[], $3::bigint[]) AS v(idx, q)
          WHERE s.product_id = $1 AND s.idx = v.idx RETURNING s.idx, v.q
       ), event AS (
         INSERT INTO order_events (product_id, type, data)
         SELECT $1, 'units.returned', jsonb_build_object('productId', $1::int, 'reason', $4::text, 'orders', $5::int,
                  'quantity', sum(q), 'segments', jsonb_agg(jsonb_build_object('segment', idx, 'units', q) ORDER BY idx))
           FROM back
       )
       SELECT count(*)::int AS n FROM back`,
    ),
    [productId, segments, units, reason, orders.length],
  )) as Array<{ n: number }>;
  // The product lock keeps every segment below segment_count in place; anything else is a bug that must not lose units.
  if (n !== segments.length)
    throw new Error(`returning units of product ${productId}: ${n} of ${segments.length} segments found`);
  return { productId, layoutVersion: product.layoutVersion, segments, units: units.reduce((a, b) => a + b, 0) };
}
