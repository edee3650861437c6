// The service's failures, each with a stable code that clients can rely on. The HTTP status of
// each code is decided in one place: ERROR_STATUS below, applied by AllExceptionsFilter.

export type ErrorCode =
  | 'VALIDATION_FAILED'
  | 'QUANTITY_OVER_LIMIT'
  | 'PAYLOAD_TOO_LARGE'
  | 'UNSUPPORTED_MEDIA_TYPE'
  | 'UNAUTHENTICATED'
  | 'IDENTITY_MISMATCH'
  | 'FORBIDDEN'
  | 'RATE_LIMITED'
  | 'NOT_FOUND'
  | 'METHOD_NOT_ALLOWED'
  | 'REQUEST_TIMEOUT'
  | 'HEADERS_TOO_LARGE'
  | 'PRODUCT_NOT_FOUND'
  | 'ORDER_NOT_FOUND'
  | 'TICKET_NOT_FOUND'
  | 'NO_WAITING_ROOM'
  | 'EVENTS_PRUNED'
  | 'CURSOR_AHEAD'
  | 'ADMISSION_REQUIRED'
  | 'ADMISSION_INVALID'
  | 'PROOF_REQUIRED'
  | 'PROOF_INVALID'
  | 'ALREADY_ORDERED'
  | 'ORDER_IN_PROGRESS'
  | 'SOLD_OUT'
  | 'SALE_NOT_STARTED'
  | 'SALE_ENDED'
  | 'ORDER_EXPIRED'
  | 'ORDER_CANCELLED'
  | 'ORDER_PAID'
  | 'BUSY'
  | 'OVERLOADED'
  | 'UNAVAILABLE'
  | 'OUTCOME_UNKNOWN'
  | 'INTERNAL';

export const ERROR_STATUS: Record<ErrorCode, number> = {
  VALIDATION_FAILED: 400,
  QUANTITY_OVER_LIMIT: 400,
  CURSOR_AHEAD: 400,
  UNAUTHENTICATED: 401,
  IDENTITY_MISMATCH: 403,
  FORBIDDEN: 403,
  SALE_NOT_STARTED: 403,
  SALE_ENDED: 403,
  ADMISSION_REQUIRED: 403,
  ADMISSION_INVALID: 403,
  PROOF_REQUIRED: 403,
  PROOF_INVALID: 403,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  REQUEST_TIMEOUT: 408,
  PRODUCT_NOT_FOUND: 404,
  ORDER_NOT_FOUND: 404,
  TICKET_NOT_FOUND: 404,
  NO_WAITING_ROOM: 409,
  ALREADY_ORDERED: 409,
  ORDER_IN_PROGRESS: 409,
  ORDER_EXPIRED: 409,
  ORDER_CANCELLED: 409,
  ORDER_PAID: 409,
  SOLD_OUT: 410,
  EVENTS_PRUNED: 410,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  RATE_LIMITED: 429,
  HEADERS_TOO_LARGE: 431,
  INTERNAL: 500,
  BUSY: 503,
  OVERLOADED: 503,
  UNAVAILABLE: 503,
  OUTCOME_UNKNOWN: 503,
};

export abstract class DomainError extends Error {
  abstract readonly code: ErrorCode;
  /** Seconds a client should wait before retrying (sent as Retry-After), when retrying helps. */
  readonly retryAfterS?: number;
}

export class ValidationFailedError extends DomainError {
  readonly code = 'VALIDATION_FAILED';
}
export class QuantityOverLimitError extends DomainError {
  readonly code = 'QUANTITY_OVER_LIMIT';
  constructor(limit: number) {
    super(`quantity is over this product's limit of ${limit} per user`);
  }
}
/** A call without an acceptable credential (none, malformed, expired, badly signed, or another role's): every route answers this one code. */
export class UnauthenticatedError extends DomainError {
  readonly code = 'UNAUTHENTICATED';
  constructor(message = 'a valid bearer token is required') {
    super(message);
  }
}
/** A verified buyer acting for another user. */
export class IdentityMismatchError extends DomainError {
  readonly code = 'IDENTITY_MISMATCH';
  constructor() {
    super('the userId is not the one the token names');
  }
}
/** A verified caller asking for what only the shop's backend may do. */
export class ForbiddenError extends DomainError {
  readonly code = 'FORBIDDEN';
  constructor(message: string) {
    super(message);
  }
}
/** Over a rate limit; Retry-After says when the budget has room again. */
export class RateLimitedError extends DomainError {
  readonly code = 'RATE_LIMITED';
  constructor(
    readonly limit: 'user' | 'ip',
    override readonly retryAfterS: number,
  ) {
    super(`too many calls from this ${limit === 'user' ? 'user' : 'address'}: retry after ${retryAfterS} s`);
  }
}
/** A path that names nothing (an asset of the operator page that does not exist). */
export class NotFoundError extends DomainError {
  readonly code = 'NOT_FOUND';
}
/** A known path asked with a method it does not have; `allow` is sent as the Allow header. */
export class MethodNotAllowedError extends DomainError {
  readonly code = 'METHOD_NOT_ALLOWED';
  constructor(
    method: string,
    readonly allow: string[],
  ) {
    super(`${method} is not a method of this path: ${allow.join(', ')}`);
  }
}
/** The request did not arrive within HEADERS_TIMEOUT_MS / REQUEST_TIMEOUT_MS; the connection is closed. */
export class RequestTimeoutError extends DomainError {
  readonly code = 'REQUEST_TIMEOUT';
  constructor() {
    super('the request did not arrive in time (HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS)');
  }
}
/** The request's headers are larger than the server reads. */
export class HeadersTooLargeError extends DomainError {
  readonly code = 'HEADERS_TOO_LARGE';
  constructor() {
    super('the request headers are too large');
  }
}
export class ProductNotFoundError extends DomainError {
  readonly code = 'PRODUCT_NOT_FOUND';
  constructor(id: number) {
    super(`product ${id} does not exist`);
  }
}
export class OrderNotFoundError extends DomainError {
  readonly code = 'ORDER_NOT_FOUND';
  constructor(id: string) {
    super(`order ${id} does not exist`);
  }
}
export class TicketNotFoundError extends DomainError {
  readonly code = 'TICKET_NOT_FOUND';
  constructor(message = 'no such ticket for this product and user; join the queue (again) to get one') {
    super(message);
  }
}
/** A stream cursor older than what is kept (EVENTS_RETENTION_S): the events after it are gone. */
export class EventsPrunedError extends DomainError {
  readonly code = 'EVENTS_PRUNED';
  constructor(readonly oldest: string) {
    super(
      `events up to ${oldest} were pruned (EVENTS_RETENTION_S): read the orders' state from the API, then go on after ${oldest}`,
    );
  }
}
/**
 * A stream cursor after the newest event: no answer ever gave it, and a reader keeping it would
 * skip every event until the stream caught up with it. `newest` is the newest cursor there is.
 */
export class CursorAheadError extends DomainError {
  readonly code = 'CURSOR_AHEAD';
  constructor(
    cursor: string,
    readonly newest: string,
  ) {
    super(
      `cursor ${cursor} is after the newest event (${newest}): read on from ${newest}, or from a cursor the stream gave`,
    );
  }
}
/** The product sells without a queue: order it directly. */
export class NoWaitingRoomError extends DomainError {
  readonly code = 'NO_WAITING_ROOM';
  constructor(productId: number) {
    super(`product ${productId} has no waiting room: order it directly`);
  }
}
/** The product sells only to buyers admitted from its queue, and the order carried no admission. */
export class AdmissionRequiredError extends DomainError {
  readonly code = 'ADMISSION_REQUIRED';
  constructor(productId: number) {
    super(`product ${productId} sells only to admitted buyers: join its queue (POST /products/${productId}/queue)`);
  }
}
/** The admission is forged, expired, already spent, or names another user or product. */
export class AdmissionInvalidError extends DomainError {
  readonly code = 'ADMISSION_INVALID';
  constructor(why: string) {
    super(`the admission is not valid: ${why}`);
  }
}
/** The product's queue needs a solved proof-of-work challenge, and the join carried none. */
export class ProofRequiredError extends DomainError {
  readonly code = 'PROOF_REQUIRED';
  constructor(productId: number) {
    super(
      `joining product ${productId}'s queue needs a solved challenge (GET /products/${productId}/queue/challenge) in the X-Proof-Of-Work header`,
    );
  }
}
/** The solution is forged, expired, already used, another product's or user's, or easier than the difficulty in force. */
export class ProofInvalidError extends DomainError {
  readonly code = 'PROOF_INVALID';
  constructor(why: string) {
    super(`the proof of work is not valid: ${why}; get a new challenge`);
  }
}
export class AlreadyOrderedError extends DomainError {
  readonly code = 'ALREADY_ORDERED';
  /** The existing order, when the service looked it up (sent as `orderId`). */
  constructor(readonly orderId?: number) {
    super('this user already has an order for this product');
  }
}
export class OrderInProgressError extends DomainError {
  readonly code = 'ORDER_IN_PROGRESS';
  constructor() {
    super('another order of this user is in progress');
  }
}
export class SoldOutError extends DomainError {
  readonly code = 'SOLD_OUT';
  constructor(
    readonly remaining: number,
    asked: number,
    /** True when only the Redis sold-out flag said so (a hint: PostgreSQL has not been asked). */
    readonly fromHint = false,
  ) {
    super(remaining === 0 ? 'sold out' : `only ${remaining} left, fewer than the ${asked} asked`);
  }
}
/** The product's sale window has not opened; Retry-After says when it does. */
export class SaleNotStartedError extends DomainError {
  readonly code = 'SALE_NOT_STARTED';
  constructor(
    startsAt: Date,
    override readonly retryAfterS: number,
  ) {
    super(`the sale starts at ${startsAt.toISOString()}`);
  }
}
export class SaleEndedError extends DomainError {
  readonly code = 'SALE_ENDED';
  constructor(endsAt: Date) {
    super(`the sale ended at ${endsAt.toISOString()}`);
  }
}
/** The reservation ran out before it was paid (or cancelled); its units went back on sale. */
export class OrderExpiredError extends DomainError {
  readonly code = 'ORDER_EXPIRED';
  constructor(id: number) {
    super(`order ${id} expired before it was paid`);
  }
}
export class OrderCancelledError extends DomainError {
  readonly code = 'ORDER_CANCELLED';
  constructor(id: number) {
    super(`order ${id} was cancelled`);
  }
}
export class OrderPaidError extends DomainError {
  readonly code = 'ORDER_PAID';
  constructor(id: number) {
    super(`order ${id} is paid and can no longer be cancelled`);
  }
}
/** Every live segment stayed locked for the whole wait bound. */
export class BusyError extends DomainError {
  readonly code = 'BUSY';
  constructor(
    message: string,
    override readonly retryAfterS: number,
  ) {
    super(message);
  }
}
/** Shed at the door: this process is too far behind to take this kind of call now (docs/overload.md). Nothing happened. */
export class OverloadedError extends DomainError {
  readonly code = 'OVERLOADED';
  constructor(override readonly retryAfterS: number) {
    super('the service is overloaded: retry later');
  }
}
/** Redis or PostgreSQL did not answer. `cause` keeps what failed, for the log only. */
export class UnavailableError extends DomainError {
  readonly code = 'UNAVAILABLE';
  constructor(
    readonly dependency: 'redis' | 'postgres',
    override readonly retryAfterS: number,
    override readonly cause?: unknown,
  ) {
    super(`${dependency === 'redis' ? 'the lock service' : 'the database'} is unavailable, retry later`);
  }
}
/**
 * PostgreSQL failed after the order's write was sent, and within the request's budget the service
 * could not learn whether it committed. Unlike BUSY and UNAVAILABLE this does not say "nothing
 * happened": retrying the same request is safe (one order per user and product) and tells.
 */
export class OutcomeUnknownError extends DomainError {
  readonly code = 'OUTCOME_UNKNOWN';
  constructor(
    override readonly retryAfterS: number,
    override readonly cause?: unknown,
    message = 'the database failed while the order was being written; whether it was placed is unknown: retry the same request to learn it',
  ) {
    super(message);
  }
}
