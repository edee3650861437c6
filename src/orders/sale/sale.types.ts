// The types an order carries through the sale: its request, its pass (user lock and hints), what a
// try at a segment and a wait came to. Below both the order algorithm (orders.service.ts) and the
// segment locking (segment-locking.service.ts), which import them from here.
import type { OrderRow, SegmentAttempt } from '../order.types';

export interface PlaceOrder {
  userId: string;
  productId: number;
  quantity: number;
  /** The queue position whose admission this order spends (products with a waiting room); recorded with the order. */
  admissionPosition?: number;
}

/** An order on its way: its user lock (if the mode has one) and the hints it opened with. */
export interface OrderPass {
  userId: string;
  /** The user lock's token; null when the mode has none or its Redis was unreachable. */
  token: string | null;
  /** Segments known empty in the product's current layout. */
  empty: Set<number>;
  /** The product's stock generation when the order opened (see StockHintsService); null when the mode keeps no hints. */
  generation: number | null;
}

/** Opening an order: its pass, or the product's sold-out flag (a hint: PostgreSQL is asked before a refusal). */
export type Entry = { kind: 'open'; pass: OrderPass } | { kind: 'soldOut' };

/**
 * How a sale ends when it ends without an error: sold, or sold out (`remaining`: the units left,
 * fewer than asked; `fromHint`: only the Redis flag said so, PostgreSQL not yet asked).
 */
export type SaleEnd = { kind: 'sold'; order: OrderRow } | SoldOut;
export type SoldOut = { kind: 'soldOut'; remaining: number; fromHint: boolean };

/**
 * One try at one segment: the sale from it (sold or short), or no sale tried: busy (another
 * holder has it), or down (its lock lives on a Redis Cluster master that cannot be reached; other
 * segments may sell).
 */
export type SegmentTry = SegmentAttempt | { kind: 'busy' } | { kind: 'down' };

/**
 * What a lock holder tells an order it served in its own hold (group commit): its order, a
 * refusal because the user already holds one, the segment too small for it (with what the segment
 * has left; null when it no longer exists), or the failure of the holder's statement.
 */
export type RideAnswer =
  | { kind: 'sold'; order: OrderRow }
  | { kind: 'alreadyOrdered' }
  | { kind: 'short'; segment: number; remaining: number | null }
  | { kind: 'failed'; error: unknown };
