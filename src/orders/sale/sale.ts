// The sale's vocabulary: the types an order carries through it (its request, its pass, what a try at
// a segment and a wait came to, how the sale ended) and its search for units from step to step, with
// the small decisions between the steps. Below both the order algorithm (orders.service.ts) and the
// segment locking (segment-locking.service.ts), which import them from here.
import { AlreadyOrderedError } from '../../common/domain-errors';
import { unreachable } from '../../common/unreachable';
import type { ProductInfo } from '../../inventory/product.types';
import type { Layout } from '../../inventory/stock.repository';
import type { OrderRow, SegmentAttempt } from '../order.types';

export interface PlaceOrder {
  userId: string;
  productId: number;
  quantity: number;
  /** The queue position whose admission this order spends (products with a waiting room); recorded with the order. */
  admissionPosition?: number;
}

/** An order on its way: its user lock and the hints it opened with. */
export interface OrderPass {
  userId: string;
  /** The user lock's token; null when its Redis could not be reached (the order goes on without it). */
  token: string | null;
  /** Segments known empty in the product's current layout. */
  empty: Set<number>;
  /** The product's stock generation when the order opened (see StockHintsService); null when the hint Redis failed. */
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
 * has left; null when it no longer exists), the holder's lock lost (its fencing token refused:
 * nothing written), or the failure of the holder's statement.
 */
export type RideAnswer =
  | { kind: 'sold'; order: OrderRow }
  | { kind: 'alreadyOrdered' }
  | { kind: 'short'; segment: number; remaining: number | null }
  | { kind: 'fenced' }
  | { kind: 'failed'; error: unknown };

/**
 * One order's search for its units, from allocate down: what it learned on the way and when it
 * gives up. Each step reads it; firstPass and waitForBusy add to `down`, allocate replaces
 * `product` when PostgreSQL shows a new layout.
 */
export interface Search {
  readonly req: PlaceOrder;
  readonly pass: OrderPass;
  /** The product as this order knows it. */
  product: ProductInfo;
  /** LOCK_WAIT_MS after the search began: with MAX_LAYOUT_ROUNDS, the bound on lost races. */
  readonly deadline: number;
  /** Segments whose lock master (Redis Cluster) could not be reached during this order, in the current layout. */
  readonly down: Set<number>;
}

/** The first pass over the segments: sold, or not, with the segments that were busy. */
export type FirstPass = { kind: 'sold'; order: OrderRow } | { kind: 'unsold'; busy: number[] };

/** What one wake-up of a waiting order came to. */
export type Wake =
  | { kind: 'sold'; order: OrderRow }
  | { kind: 'empty'; segment: number }
  | { kind: 'unreachable'; segment: number }
  | { kind: 'again' };

/** After the authoritative read: single segments again (all but those that hold q skipped), or q spread over several. */
export type NextStep =
  { kind: 'singles'; skip: ReadonlySet<number> } | { kind: 'spread'; over: Array<{ idx: number; stock: number }> };

export function nextStep(search: Search, layout: Layout): NextStep {
  const reachable = layout.segments.filter((s) => !search.down.has(s.idx));
  const fitting = new Set(reachable.filter((s) => s.stock >= search.req.quantity).map((s) => s.idx));
  if (fitting.size === 0) return { kind: 'spread', over: reachable };
  return { kind: 'singles', skip: new Set(layout.segments.map((s) => s.idx).filter((i) => !fitting.has(i))) };
}

/** A holder of this process served the waiting order in its own hold (group commit): its answer, as a wake-up. */
export function servedAnswer(answer: RideAnswer, quantity: number): Wake {
  switch (answer.kind) {
    case 'sold':
      return { kind: 'sold', order: answer.order };
    case 'alreadyOrdered':
      throw new AlreadyOrderedError();
    case 'failed':
      throw answer.error;
    case 'fenced':
      return { kind: 'again' };
    case 'short':
      // Too small for this order, or gone: not worth waiting for. Else it is worth another try.
      return answer.remaining === null || answer.remaining < quantity
        ? { kind: 'empty', segment: answer.segment }
        : { kind: 'again' };
    default:
      return unreachable(answer);
  }
}
