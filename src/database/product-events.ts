// The events that carry an operator's intent or a return of units, written by the code that makes
// the change, as one more statement of its transaction (order changes and sold-out are written by
// triggers, see migrations/1764100000000-OrderEvents.ts and 1764300000000-SoldOutAfterCause.ts).

export type ProductEventType =
  'product.created' | 'product.window_changed' | 'product.restocked' | 'product.rebalanced' | 'units.returned';

/** Anything that runs SQL inside the caller's transaction (a TypeORM EntityManager or QueryRunner). */
export interface Querier {
  query(sql: string, params?: unknown[]): Promise<unknown>;
}

export async function writeProductEvent(
  tx: Querier,
  productId: number,
  type: ProductEventType,
  data: Record<string, unknown>,
): Promise<void> {
  await tx.query('INSERT INTO order_events (product_id, type, data) VALUES ($1, $2, $3::jsonb)', [
    productId,
    type,
    JSON.stringify({ productId, ...data }),
  ]);
}
