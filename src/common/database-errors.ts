// Turns pg/TypeORM failures into domain errors: a unique violation on orders is a fact (already
// ordered), a lost or refused connection is a dependency outage (503), anything else stays a bug.
// Also tells, for a failed write, whether PostgreSQL may have committed it (see writeFailure).
import { QueryFailedError } from 'typeorm';
import { AlreadyOrderedError, BusyError, UnavailableError } from './domain-errors';

const UNAVAILABLE_SQLSTATE_CLASSES = ['08', '53', '57', '58'];

export function sqlState(err: unknown): string | undefined {
  const e = err as { code?: unknown; driverError?: { code?: unknown } };
  const code = e?.driverError?.code ?? e?.code;
  return typeof code === 'string' ? code : undefined;
}

export function isUniqueViolation(err: unknown, constraint?: string): boolean {
  if (sqlState(err) !== '23505') return false;
  if (!constraint) return true;
  const e = err as { constraint?: string; driverError?: { constraint?: string } };
  return (e.driverError?.constraint ?? e.constraint) === constraint;
}

/** SQLSTATE of a write refused for a stale fencing token (migrations/1764470000000-SegmentFencing.ts). */
export const STALE_FENCE = 'FENCE';

/**
 * When PostgreSQL refused a write for a stale fencing token: the segment's stored fence (the
 * error's DETAIL; 0 if it is missing, which only forgoes raising the counter). Else null.
 */
export function staleFence(err: unknown): number | null {
  if (sqlState(err) !== STALE_FENCE) return null;
  const e = err as { detail?: unknown; driverError?: { detail?: unknown } };
  const detail = e?.driverError?.detail ?? e?.detail;
  return typeof detail === 'string' && /^\d+$/.test(detail) ? Number(detail) : 0;
}

/** The severity PostgreSQL gave an error it sent (ERROR, FATAL, PANIC); undefined for client-side failures. */
function severity(err: unknown): string | undefined {
  const e = err as { severity?: unknown; driverError?: { severity?: unknown } };
  const s = e?.driverError?.severity ?? e?.severity;
  return typeof s === 'string' ? s : undefined;
}

/** True for errors that mean PostgreSQL is down, unreachable, overloaded or timing out. */
export function isDatabaseOutage(err: unknown): boolean {
  // A FATAL or PANIC ends the session, whatever its SQLSTATE: a shutdown (57P01, 57P02), and also
  // the server's own idle_in_transaction_session_timeout (25P03) or transaction_timeout (25P04),
  // which a stall between the service and PostgreSQL in the middle of a transaction sets off.
  const sev = severity(err);
  if (sev === 'FATAL' || sev === 'PANIC') return true;
  const state = sqlState(err);
  if (state && /^[0-9A-Z]{5}$/.test(state)) return UNAVAILABLE_SQLSTATE_CLASSES.includes(state.slice(0, 2));
  if (state && /^E[A-Z]+/.test(state)) return true; // ECONNREFUSED, ECONNRESET, ETIMEDOUT ...
  const message = err instanceof Error ? err.message : String(err);
  return /timeout|terminated|Connection|connect|ECONN|socket|not queryable|pool/i.test(message);
}

export function mapDatabaseError(err: unknown, retryAfterS: number): unknown {
  if (isUniqueViolation(err, 'orders_one_live_per_user')) return new AlreadyOrderedError();
  const state = sqlState(err);
  // Deadlock, serialization failure or lock wait timeout: nothing was written; the client may simply retry.
  if (state === '40P01' || state === '40001' || state === '55P03')
    return new BusyError('the stock was contended, retry', retryAfterS);
  if (isDatabaseOutage(err)) return new UnavailableError('postgres', retryAfterS, err);
  return err;
}

/**
 * What a failed statement says about its own effect:
 * - `not-sent`: it never reached PostgreSQL (the pool could not connect or timed out waiting, the
 *   client was already broken). TypeORM throws these unwrapped; pg refuses with "not queryable".
 * - `rejected`: PostgreSQL answered it with an ERROR (constraint, statement_timeout 57014, deadlock,
 *   ...): the statement, and in autocommit its transaction, was rolled back.
 * - `unknown`: it was sent and then the connection broke (terminated, reset, a FATAL such as
 *   57P01/57P02 from a shutting down server) or the client stopped waiting (pg's query_timeout):
 *   PostgreSQL may have run it to the end, commit included.
 * A statement inside an open transaction that fails `unknown` cannot have committed by itself;
 * only for an autocommit statement or the COMMIT does `unknown` mean "maybe committed".
 */
export type WriteFailure = 'not-sent' | 'rejected' | 'unknown';

export function writeFailure(err: unknown): WriteFailure {
  // TypeORM wraps only what pg's client.query reported; a failure to get a connection arrives bare.
  if (!(err instanceof QueryFailedError)) return 'not-sent';
  const driver = (err as QueryFailedError & { driverError?: unknown }).driverError as
    { severity?: unknown; message?: unknown } | undefined;
  // pg's DatabaseError carries the server's severity: ERROR ends the statement, FATAL/PANIC the session.
  if (typeof driver?.severity === 'string') return driver.severity === 'ERROR' ? 'rejected' : 'unknown';
  if (typeof driver?.message === 'string' && /not queryable/.test(driver.message)) return 'not-sent';
  return 'unknown';
}
