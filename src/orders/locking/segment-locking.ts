// How an order holds a segment while it sells from it. The mode is chosen once, at start, from
// STOCK_LOCKING (see orders.module.ts), so the order algorithm in orders.service.ts reads top to
// bottom without asking which mode it runs in. The types an order carries through a mode (its
// request, its pass, what a try at a segment and a wait came to) live here, below both the order
// path and the gate, which import them from here.
import type { ProductInfo } from '../../inventory/product.types';
import type { WaitEnd } from '../../locks/local-lock-board';
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

export abstract class SegmentLocking {
  /** Opens an order: the user lock and the hints where the mode has them. */
  abstract enter(product: ProductInfo, req: PlaceOrder): Promise<OrderPass>;

  /** Closes it; never throws. */
  abstract leave(pass: OrderPass): Promise<void>;

  /**
   * True when orders of this process already wait for the product, or when it holds as many of the
   * product's segments as it may at once (atCapacity): a new order queues behind them.
   */
  abstract queueBehind(productId: number): boolean;

  /** True when this process holds as many of the product's segments as it may at once: wait, and ride in one of those holds. */
  abstract atCapacity(productId: number): boolean;

  /** One try at one segment (see SegmentTry). */
  abstract attempt(product: ProductInfo, idx: number, req: PlaceOrder): Promise<SegmentTry>;

  /**
   * Waits for a chance at a busy segment: a release here, a holder that served this order, or the
   * retry delay. A patient wait (every segment it could try is held by this process) has no retry
   * to make on a timer: it ends on a release or a ride, its timer only a safety net.
   */
  abstract wait(productId: number, req: PlaceOrder, patient: boolean): Promise<WaitEnd<RideAnswer>>;

  /** Whether this process holds the segment itself (asking for it would only say busy). */
  abstract heldHere(productId: number, idx: number): boolean;

  /** q spread over several segments in one transaction; null when they no longer hold q. */
  abstract sellSpread(product: ProductInfo, picked: number[], req: PlaceOrder): Promise<OrderRow | null>;

  /** Remembers that nothing is left, where the mode keeps such hints, unless units came back since the pass opened; never throws. */
  abstract soldOut(productId: number, pass: OrderPass): Promise<void>;
}
