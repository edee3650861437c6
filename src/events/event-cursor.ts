// Where a reader is in the event stream: the (tx, id) of the last event it has, written `<tx>-<id>`.
// Events are handed out in (tx, id) order and only once every transaction older than them has ended
// (see EventsRepository.after), so "everything after this cursor" never misses an event that
// commits later. `0-0` is the start of the stream.

export interface EventCursor {
  /** The writing transaction's id (xid8), as a decimal string: it outgrows a JavaScript number. */
  tx: string;
  /** The event's id within the stream (bigint), as a decimal string. */
  id: string;
}

export const START: EventCursor = { tx: '0', id: '0' };

/** A cursor as clients send it: two unsigned integers of at most 19 digits (they fit PostgreSQL's xid8 and bigint). */
export const CURSOR_PATTERN = /^(0|[1-9][0-9]{0,18})-(0|[1-9][0-9]{0,18})$/;

export function formatCursor(c: EventCursor): string {
  return `${c.tx}-${c.id}`;
}

/** The cursor in `text`, or null when it is not one. */
export function parseCursor(text: string): EventCursor | null {
  const m = CURSOR_PATTERN.exec(text);
  if (!m) return null;
  // 19 digits may still be above 2^63 - 1, which neither column holds.
  if (BigInt(m[1]) > MAX || BigInt(m[2]) > MAX) return null;
  return { tx: m[1], id: m[2] };
}

const MAX = 2n ** 63n - 1n;

/** Whether `a` comes before `b` in the stream. */
export function before(a: EventCursor, b: EventCursor): boolean {
  const tx = BigInt(a.tx) - BigInt(b.tx);
  return tx < 0n || (tx === 0n && BigInt(a.id) < BigInt(b.id));
}
