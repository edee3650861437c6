// Turns pg/TypeORM failures into domain errors: a unique violation on orders is a fact (already
// ordered), a lost or refused connection is a dependency outage (503), anything else stays a bug.
import { AlreadyOrderedError, BusyError, UnavailableError } from './domain-errors';

const UNAVAILABLE_SQLSTATE_CLASSES = ['08', '53', '57', '58'];

function sqlState(err: unknown): string | undefined {
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

/** True for errors that mean PostgreSQL is down, unreachable, overloaded or timing out. */
export function isDatabaseOutage(err: unknown): boolean {
  const state = sqlState(err);
  if (state && /^[0-9A-Z]{5}$/.test(state)) return UNAVAILABLE_SQLSTATE_CLASSES.includes(state.slice(0, 2));
  if (state && /^E[A-Z]+/.test(state)) return true; // ECONNREFUSED, ECONNRESET, ETIMEDOUT ...
  const message = err instanceof Error ? err.message : String(err);
  return /timeout|terminated|Connection|connect|ECONN|socket|not queryable|pool/i.test(message);
}

export function mapDatabaseError(err: unknown, retryAfterS: number): unknown {
  if (isUniqueViolation(err, 'orders_one_per_user')) return new AlreadyOrderedError();
  const state = sqlState(err);
  // Deadlock, serialization failure or lock wait timeout: nothing was written; the client may simply retry.
  if (state === '40P01' || state === '40001' || state === '55P03') return new BusyError('the stock was contended, retry', retryAfterS);
  if (isDatabaseOutage(err)) return new UnavailableError('postgres', retryAfterS, err);
  return err;
}
