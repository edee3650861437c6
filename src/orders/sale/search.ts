// One order's search for its units, as the order algorithm (orders.service.ts) carries it from step
// to step, and the small decisions between its steps: what to try after PostgreSQL's read, and what a
// holder's answer to a waiting order comes to.
import { AlreadyOrderedError } from '../../common/domain-errors';
import { unreachable } from '../../common/unreachable';
import type { ProductInfo } from '../../inventory/product.types';
import type { Layout } from '../../inventory/stock.repository';
import type { OrderRow } from '../order.types';
import type { OrderPass, PlaceOrder, RideAnswer } from './sale.types';

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
    case 'short':
      // Too small for this order, or gone: not worth waiting for. Else it is worth another try.
      return answer.remaining === null || answer.remaining < quantity
        ? { kind: 'empty', segment: answer.segment }
        : { kind: 'again' };
    default:
      return unreachable(answer);
  }
}
