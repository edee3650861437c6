// What an order is to the code above the SQL: its row, how a sale from a segment (alone or in a
// batch) turned out, what a cancel or an expiry gave back, and the writes whose outcome is unknown.
// The repositories under ./repositories produce these; the order path, the segment locking and the
// controller read them, so none of them needs to know a column name.

export interface Allocation {
  segment: number;
  quantity: number;
}

export type OrderStatus = 'reserved' | 'paid' | 'cancelled' | 'expired';

export interface OrderRow {
  id: number;
  productId: number;
  userId: string;
  quantity: number;
  allocations: Allocation[];
  status: OrderStatus;
  createdAt: Date;
  expiresAt: Date;
  /** Set once paid. */
  paidAt?: Date;
  /** Set once cancelled or expired. */
  closedAt?: Date;
}

/** One order of a batch: what it asks for. */
export interface BatchEntry {
  userId: string;
  quantity: number;
  /** The queue position whose admission the order spends (waiting-room products). */
  admissionPosition?: number;
}

/**
 * A sale write refused by PostgreSQL because its fencing token was below the segment's stored
 * fence: a newer holder of the segment's lock has written since this one took it (this holder
 * outlived its lease), or the lock's token counter fell behind. Nothing was written.
 */
export interface Fenced {
  kind: 'fenced';
  /** The segment whose fence refused the write. */
  segment: number;
  /** The token the write carried. */
  token: number;
  /** The fence PostgreSQL holds for the segment. */
  fence: number;
}

/** The answer for one entry of a batch. */
export type BatchResult = { kind: 'sold'; order: OrderRow } | { kind: 'alreadyOrdered' } | { kind: 'short' };

export interface BatchAttempt {
  kind: 'decided';
  /** One per entry, in the entries' order. */
  results: BatchResult[];
  /** Units left in the segment afterwards; null when the segment no longer exists. */
  remaining: number | null;
}

/**
 * One sale from one segment: sold (the segment held enough), or short (it did not; nothing was
 * written). Either way, the units left in the segment afterwards; null when the segment no longer
 * exists (or is unknown).
 */
export type SegmentAttempt =
  { kind: 'sold'; order: OrderRow; remaining: number | null } | { kind: 'short'; remaining: number | null };

/** Units that went back on sale: where, so that the hints hiding them can be cleared. */
export interface ReturnedUnits {
  productId: number;
  layoutVersion: number;
  segments: number[];
  units: number;
}

/** What one sweep of a product expired. */
export interface Expired {
  orders: number;
  returned: ReturnedUnits | null;
  /** For each expired order, how long after its expiresAt it was expired (ms, PostgreSQL's clock). */
  lagsMs: number[];
}

/**
 * A sale whose write reached PostgreSQL and then lost its reply: it may have committed. Carries
 * what settle() needs to find out. Internal: settle() turns it into an answer that is the truth.
 */
export class UncertainWrite extends Error {
  constructor(
    readonly productId: number,
    readonly userId: string,
    readonly quantity: number,
    /** The segments the write took from (or would have). */
    readonly segments: number[],
    /** Written at the head of every statement of the attempt, to find it in pg_stat_activity. */
    readonly tag: string,
    /** process.hrtime of just before the write was sent. */
    readonly sentAt: bigint,
    override readonly cause: unknown,
  ) {
    super('the outcome of an order write is unknown');
  }
}

/** A batch whose statement lost its reply: one UncertainWrite per entry, to settle each on its own. */
export class UncertainBatch extends Error {
  constructor(readonly writes: UncertainWrite[]) {
    super('the outcome of a batch of order writes is unknown');
  }
}
