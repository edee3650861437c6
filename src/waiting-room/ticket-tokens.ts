// A queue ticket as its buyer carries it: a JWT (HS256, fast-jwt) naming the user, the product, its
// bucket and, where known when it was signed, its position (0 until its bucket's draw places it). The
// ticket's row in PostgreSQL is the record; the token lets any process answer a poll from memory,
// with no Redis and no PostgreSQL, and it never depends on what Redis remembers.
import { createSigner, createVerifier, TokenError } from 'fast-jwt';
import { TicketNotFoundError } from '../common/domain-errors';
import { BoundedMap } from './bounded-map';
import { ticketIdFor } from './lottery';

/** A ticket token is refused this many characters early: a real one is about 200. */
const MAX_TICKET_LENGTH = 1024;
/**
 * A ticket token lasts a day or a little more: its expiry is rounded up to the hour, so joining
 * again within the hour hands out the very same token, and later a fresh one for the same place.
 */
export const TICKET_TTL_MS = 24 * 3600 * 1000;
const HOUR_S = 3600;

export interface TicketClaims {
  userId: string;
  productId: number;
  /** The ticket's id in the published lottery (24 hex characters). */
  ticketId: string;
  /** The ticket's place; null when its place comes from its bucket's draw. */
  position: number | null;
  /** The ticket's bucket (0: the pre-queue); null for a ticket numbered on arrival before buckets. */
  bucket: number | null;
}

interface Claims {
  sub?: unknown;
  pid?: unknown;
  pos?: unknown;
  bkt?: unknown;
  exp?: unknown;
}

/** Tokens remembered once verified (at most this many; those not read for longest go first). */
const VERIFIED_MAX = 100_000;

export class TicketTokens {
  private readonly signer: (payload: Record<string, unknown>) => string;
  private readonly verifier: (token: string) => Claims;
  /**
   * A buyer polls the same token many times: a token that verified is remembered with its claims
   * (the lottery id derived already) until it expires, so a poll costs one lookup by the token's
   * text instead of two SHA-256 (fast-jwt's cache key, then the lottery id).
   */
  private readonly verified = new BoundedMap<string, { claims: TicketClaims; expiresMs: number }>(VERIFIED_MAX);

  constructor(key: Buffer) {
    this.signer = createSigner({ key, algorithm: 'HS256', noTimestamp: true });
    this.verifier = createVerifier({ key, algorithms: ['HS256'], requiredClaims: ['sub', 'pid', 'pos', 'exp'] });
  }

  issue(t: TicketClaims): string {
    const exp = Math.ceil((Date.now() + TICKET_TTL_MS) / 1000 / HOUR_S) * HOUR_S;
    // Not remembered as verified here: a join would pay a map entry for each ticket of the crowd
    // (held until evicted), to spare one HMAC at the first poll, which may reach another process.
    return this.signer({ sub: t.userId, pid: t.productId, pos: t.position ?? 0, bkt: t.bucket ?? undefined, exp });
  }

  /** The ticket a token carries for this product; TICKET_NOT_FOUND for anything else (forged, expired, another product's). */
  verify(token: string, productId: number): TicketClaims {
    if (token.length === 0 || token.length > MAX_TICKET_LENGTH) throw new TicketNotFoundError();
    const known = this.verified.get(token);
    if (known !== undefined && Date.now() < known.expiresMs) {
      if (known.claims.productId !== productId) throw new TicketNotFoundError();
      return known.claims;
    }
    let claims: Claims;
    try {
      claims = this.verifier(token);
    } catch (err) {
      throw new TicketNotFoundError(
        err instanceof TokenError && err.code === TokenError.codes.expired
          ? 'the ticket expired: join again'
          : undefined,
      );
    }
    const { sub, pid, pos, bkt, exp } = claims;
    if (pid !== productId || typeof sub !== 'string' || typeof exp !== 'number') throw new TicketNotFoundError();
    if (typeof pos !== 'number' || !Number.isSafeInteger(pos) || pos < 0) throw new TicketNotFoundError();
    if (bkt !== undefined && (typeof bkt !== 'number' || !Number.isSafeInteger(bkt) || bkt < 0))
      throw new TicketNotFoundError();
    // The lottery id is derived, not carried: a shorter token, and one fact less to trust. A token
    // from before buckets with no place yet was a pre-queue ticket's: bucket 0.
    const verified = {
      userId: sub,
      productId: pid,
      ticketId: ticketIdFor(pid, sub),
      position: pos === 0 ? null : pos,
      bucket: typeof bkt === 'number' ? bkt : pos === 0 ? 0 : null,
    };
    this.verified.set(token, { claims: verified, expiresMs: exp * 1000 });
    return verified;
  }
}
