// How an order holds a segment while it sells from it. The mode is chosen once, at start, from
// STOCK_LOCKING (see orders.module.ts), so the order algorithm in orders.service.ts reads top to
// bottom without asking which mode it runs in.
import type { ProductInfo } from '../../inventory/product.types';
import type { WaitEnd } from '../../locks/local-lock-board';
import type { BatchResult, OrderRow, SegmentAttempt } from '../order.types';

export interface PlaceOrder {
  userId: string;
  productId: number;
  quantity: number;
}

/** An order on its way: its user lock (if the mode has one) and the segments known empty. */
export interface OrderPass {
  userId: string;
  /** The user lock's token; null when the mode has none or its Redis was unreachable. */
  token: string | null;
  empty: Set<number>;
  /** The product's stock generation when the order opened (see StockHintsService); null when the mode keeps no hints. */
  generation: number | null;
}

/** What a lock holder tells an order it served in its own hold (group commit). */
export type RideAnswer = { segment: number; result: BatchResult; remaining: number | null } | { error: unknown };

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

  /**
   * One try at one segment: an order, what the segment has left (empty, too small, gone), busy, or
   * down: its lock lives on a Redis Cluster master that cannot be reached (other segments may sell).
   */
  abstract attempt(product: ProductInfo, idx: number, req: PlaceOrder): Promise<SegmentAttempt | 'busy' | 'down'>;

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
