// Bearer tokens: reading one from an Authorization header, and comparing a shared secret in
// constant time (admin and shop tokens).
import { createHash, timingSafeEqual } from 'node:crypto';

/** The token of `Authorization: Bearer <token>`, or null. */
export function bearerToken(header: string | undefined): string | null {
  if (header === undefined || header.length < 8 || header.slice(0, 7).toLowerCase() !== 'bearer ') return null;
  // Exact: no trimming, so a token with stray spaces is another token.
  return header.slice(7);
}

const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();

/** A secret to compare tokens with: digests have one length whatever was sent, so the time says nothing about the secret. */
export class SharedSecret {
  private readonly expected: Buffer;

  constructor(secret: string) {
    this.expected = digest(secret);
  }

  matches(token: string | null): boolean {
    return token !== null && timingSafeEqual(digest(token), this.expected);
  }
}
