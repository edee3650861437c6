// The bare-lua peer's audit. That peer holds the stock in Redis and never deducts stock_segments,
// so harness/verify.ts (which reads what is left from the segments) cannot judge it; this reads what
// is left from Redis instead. The bare peer deducts segments like the service: verify.ts audits it.
import Redis from 'ioredis';
import { Client } from 'pg';
import { luaPeerKeys } from './lua-keys';

/** The audit: the same fields as harness/verify.ts `Audit` (so its `verify()` can take it), plus two of its own. */
export type LuaPeerAudit = Awaited<ReturnType<typeof auditLuaPeer>>;

/**
 * Reads PostgreSQL in one statement and Redis right after: call it once the peer has gone quiet
 * (no order in flight), or an order between the two reads shows as a unit missing.
 */
export async function auditLuaPeer(db: Client, redisUrl: string, productId: number) {
  const { rows } = await db.query(
    `SELECT p.total_stock::bigint AS total_stock,
            (SELECT COALESCE(sum(stock), 0) FROM stock_segments WHERE product_id = p.id)::bigint AS segments,
            (SELECT count(*) FROM stock_segments WHERE product_id = p.id AND stock < 0)::int AS negative_segments,
            (SELECT COALESCE(sum(quantity), 0) FROM orders WHERE product_id = p.id)::bigint AS ordered,
            (SELECT count(*) FROM orders WHERE product_id = p.id)::int AS orders,
            (SELECT count(*) FROM (SELECT user_id FROM orders WHERE product_id = p.id GROUP BY user_id HAVING count(*) > 1) d)::int AS duplicate_users,
            (SELECT COALESCE(array_agg(user_id), '{}') FROM orders WHERE product_id = p.id) AS buyers
       FROM products p WHERE p.id = $1`,
    [productId],
  );
  if (rows.length === 0) throw new Error(`product ${productId} is not in PostgreSQL`);
  const r = rows[0] as {
    total_stock: string;
    segments: string;
    negative_segments: number;
    ordered: string;
    orders: number;
    duplicate_users: number;
    buyers: string[];
  };
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
  try {
    await redis.connect();
    const [left, recorded] = await Promise.all([
      redis.get(luaPeerKeys.stock(productId)),
      r.buyers.length > 0
        ? redis.smismember(luaPeerKeys.buyers(productId), ...r.buyers)
        : Promise.resolve([] as number[]),
    ]);
    const totalStock = Number(r.total_stock);
    const remaining = left === null ? totalStock : Number(left);
    return {
      totalStock,
      /** Units left, from Redis (the stock as stocked when the peer never loaded the product). */
      remaining,
      /** Units in orders, from PostgreSQL. */
      ordered: Number(r.ordered),
      orders: r.orders,
      /** 1 when the Redis count is below 0, plus any PostgreSQL segment below 0. */
      negativeSegments: r.negative_segments + (remaining < 0 ? 1 : 0),
      duplicateUsers: r.duplicate_users,
      /** stock_segments still sum to total_stock: nothing deducted them behind the peer's back. */
      segmentsUntouched: Number(r.segments) === totalStock,
      /** Every order's buyer is in the Redis buyer set (no order slipped past the script). */
      buyersRecorded: recorded.every((m) => m === 1),
    };
  } finally {
    redis.disconnect();
  }
}

/** What is wrong with an audit, one line each; empty when stock is conserved, nothing oversold and no user twice. */
export function luaPeerAuditProblems(a: LuaPeerAudit): string[] {
  const problems: string[] = [];
  if (a.ordered + a.remaining !== a.totalStock)
    problems.push(`ordered ${a.ordered} + Redis remaining ${a.remaining} != stocked ${a.totalStock}`);
  if (a.ordered > a.totalStock) problems.push(`oversold: ${a.ordered} units ordered of ${a.totalStock}`);
  if (a.negativeSegments > 0) problems.push(`${a.negativeSegments} count(s) below 0`);
  if (a.duplicateUsers > 0) problems.push(`${a.duplicateUsers} user(s) with more than one order`);
  if (!a.segmentsUntouched) problems.push('stock_segments no longer sum to total_stock');
  if (!a.buyersRecorded) problems.push('an order whose buyer is not in the Redis buyer set');
  return problems;
}
