// The queue's arithmetic that anyone must be able to redo: a ticket's id, its shard, and the
// lottery that orders the pre-queue. Kept free of Redis and Nest so that the published algorithm
// (ALGORITHM below) and this code are one thing, tested against each other.
import { createHash, createHmac } from 'node:crypto';

/** A ticket id: 24 lowercase hex characters. */
export const TICKET_ID = /^[0-9a-f]{24}$/;

/**
 * The ticket of a user for a product. Derived, not drawn: one user has one ticket per product by
 * construction, a join retried on another process finds the same ticket, and the service cannot
 * pick ids to move someone up the lottery after committing to its seed.
 */
export function ticketIdFor(productId: number, userId: string): string {
  return createHash('sha256').update(`${productId}:${userId}`).digest('hex').slice(0, 24);
}

/** A ticket's lottery draw: HMAC-SHA256 of its id under the seed, as lowercase hex. */
export function lotteryKey(seed: Buffer, ticketId: string): string {
  return createHmac('sha256', seed).update(ticketId).digest('hex');
}

/** SHA-256 of the seed, lowercase hex: published before the start, so the seed cannot change afterwards. */
export function seedHashOf(seed: Buffer): string {
  return createHash('sha256').update(seed).digest('hex');
}

/** The pre-queue in lottery order: positions 1, 2, ... follow this list. */
export function lotteryOrder(seed: Buffer, ticketIds: readonly string[]): string[] {
  return ticketIds
    .map((id) => ({ id, key: lotteryKey(seed, id) }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
    .map((t) => t.id);
}

/** What GET /products/:id/queue/fairness says of how to recompute the pre-queue's order. */
export const ALGORITHM =
  'hmac-sha256-ascending: for each pre-queue ticket id t (its lotteryId: 24 lowercase hex characters, as ASCII), ' +
  'k = HMAC-SHA256(key = the seed bytes (hex-decoded), message = t), written as lowercase hex; ' +
  'sort the tickets by k ascending (by t when two k are equal); the first is position 1. ' +
  'Check the seed first: SHA-256(seed bytes) must equal seedHash. ' +
  'Tickets taken after the start follow the pre-queue in arrival order.';
