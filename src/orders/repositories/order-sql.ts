// What the order repositories share: the columns of an order as they read it, the predicate of a
// live order, the mapping of a read row to an OrderRow, and the tag that heads every statement of
// a write attempt so that the attempt can be found in pg_stat_activity after a lost reply.
import { Allocation, OrderRow, OrderStatus } from '../order.types';

export const ORDER_COLUMNS =
  'id, product_id, user_id, quantity, allocations, status, created_at, expires_at, paid_at, closed_at';

/** Orders that count against one order per user and product (the partial unique index's predicate). */
export const LIVE = `status IN ('reserved', 'paid')`;

/** An order as it comes back from a read, with its age by PostgreSQL's own clock. */
export interface OrderRecord {
  id: string;
  product_id: number;
  user_id: string;
  quantity: number;
  allocations: Allocation[];
  status: OrderStatus;
  created_at: Date;
  expires_at: Date;
  paid_at: Date | null;
  closed_at: Date | null;
  age_ms?: number;
}

export const toOrderRow = (r: OrderRecord): OrderRow => ({
  id: Number(r.id),
  productId: r.product_id,
  userId: r.user_id,
  quantity: r.quantity,
  allocations: r.allocations,
  status: r.status,
  createdAt: r.created_at,
  expiresAt: r.expires_at,
  ...(r.paid_at ? { paidAt: r.paid_at } : {}),
  ...(r.closed_at ? { closedAt: r.closed_at } : {}),
});

/** Puts the attempt's tag first in the statement, where pg_stat_activity keeps it. */
export function tagged(tag: string, sql: string): string {
  return `/* order-write ${tag} */ ${sql}`;
}
