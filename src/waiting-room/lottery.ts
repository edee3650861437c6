// The queue's arithmetic that anyone must be able to redo: a ticket's id, and the lottery that
// orders each bucket of the queue (the pre-queue is bucket 0). Kept free of Redis and Nest so that
// the published algorithm (ALGORITHM below) and this code are one thing, tested against each other.
import { createHash, createHmac, createSecretKey, hash, KeyObject } from 'node:crypto';

/** A ticket id: 24 lowercase hex characters. */
export const TICKET_ID = /^[0-9a-f]{24}$/;

/**
 * The ticket of a user for a product. Derived, not drawn: one user has one ticket per product by
 * construction, a join retried on another process finds the same ticket, and the service cannot
 * pick ids to move someone up the lottery after committing to its seed.
 */
export function ticketIdFor(productId: number, userId: string): string {
  // crypto.hash, the one-shot digest: a third of createHash's time for a string this short (0.3 against 0.9 µs).
  return hash('sha256', `${productId}:${userId}`, 'hex').slice(0, 24);
}

/** The seed as a key object, made once per seed: turning raw bytes into a key on every HMAC costs more than the HMAC. */
const seedKeys = new WeakMap<Buffer, KeyObject>();
function keyOf(seed: Buffer): KeyObject {
  let key = seedKeys.get(seed);
  if (key === undefined) seedKeys.set(seed, (key = createSecretKey(seed)));
  return key;
}

/** A ticket's lottery draw: HMAC-SHA256 of its id under the seed, as lowercase hex. */
export function lotteryKey(seed: Buffer, ticketId: string): string {
  return createHmac('sha256', keyOf(seed)).update(ticketId).digest('hex');
}

/**
 * A lottery key read as a fraction of the key space (its first 32 bits): the draw will place its
 * ticket at about this share of the pre-queue.
 */
export function shareOfKey(key: Buffer): number {
  return key.readUInt32BE(0) / 2 ** 32;
}

/** A ticket's lottery key's share of the key space (see shareOfKey). */
export function keyShare(seed: Buffer, ticketId: string): number {
  return shareOfKey(Buffer.from(lotteryKey(seed, ticketId).slice(0, 8), 'hex'));
}

/**
 * A ticket's rank (1 = first) in its drawn bucket, given as the first 8 bytes of each lottery key in
 * drawn order (see drawnOrder): by binary search. Null when its key is not there, or when another
 * key shares its first 8 bytes (about one pair in 10^7 for a million tickets): then the draw's
 * tie-break (the full key, then the ticket id) must decide, from the bucket's ticket ids.
 */
export function drawnRank(seed: Buffer, ticketId: string, drawnKeys: Buffer): number | null {
  const mine = Buffer.from(lotteryKey(seed, ticketId).slice(0, 16), 'hex');
  const count = drawnKeys.length / 8;
  let lo = 0;
  let hi = count - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const c = mine.compare(drawnKeys, mid * 8, mid * 8 + 8);
    if (c < 0) hi = mid - 1;
    else if (c > 0) lo = mid + 1;
    else {
      const twin =
        (mid > 0 && mine.compare(drawnKeys, mid * 8 - 8, mid * 8) === 0) ||
        (mid + 1 < count && mine.compare(drawnKeys, mid * 8 + 8, mid * 8 + 16) === 0);
      return twin ? null : mid + 1;
    }
  }
  return null;
}

/** SHA-256 of the seed, lowercase hex: published before the start, so the seed cannot change afterwards. */
export function seedHashOf(seed: Buffer): string {
  return createHash('sha256').update(seed).digest('hex');
}

/** A bucket's tickets in lottery order, with their keys: its first position goes to the first. */
function drawn(seed: Buffer, ticketIds: readonly string[]): Array<{ id: string; key: string }> {
  return ticketIds
    .map((id) => ({ id, key: lotteryKey(seed, id) }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** A bucket in lottery order: its positions follow this list. */
export function lotteryOrder(seed: Buffer, ticketIds: readonly string[]): string[] {
  return drawn(seed, ticketIds).map((t) => t.id);
}

/** A bucket's drawn order as every process keeps it: the first 8 bytes of each lottery key, in order. */
export function drawnOrder(seed: Buffer, ticketIds: readonly string[]): Buffer {
  const keys = Buffer.alloc(ticketIds.length * 8);
  drawn(seed, ticketIds).forEach((t, i) => keys.write(t.key.slice(0, 16), i * 8, 'hex'));
  return keys;
}

/** What the fairness record says of how to recompute the queue's order, bucket by bucket. */
export const ALGORITHM =
  'buckets, then hmac-sha256-ascending: every ticket falls in one bucket, the pre-queue (bucket 0: joined before the start) ' +
  "or the bucket of PostgreSQL's clock when it joined (floor(epoch ms / bucketMs)); buckets are sealed in time order " +
  'and each non-empty one is a draw with a seed. In a draw, for each ticket id t (its lotteryId: 24 lowercase hex ' +
  'characters, as ASCII), k = HMAC-SHA256(key = the seed bytes (hex-decoded), message = t), written as lowercase hex; ' +
  "sort the tickets by k ascending (by t when two k are equal); the first has the draw's firstPosition, the next " +
  "one more. Check the seeds first: SHA-256 of the pre-queue's seed must equal seedHash; SHA-256 of every later " +
  "draw's seed must equal the seed of the draw before it, or the head of the chain it starts " +
  '(GET /products/:id/queue/draws lists both).';
