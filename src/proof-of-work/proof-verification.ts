// Challenges and their solutions in altcha's v1 scheme, computed in memory: the challenge is
// SHA-256(salt + secret number), its signature HMAC-SHA256(key, challenge), and the salt carries the
// challenge's parameters, so the signature covers them. altcha-lib defines the format and solves it
// in the buyer's page; this file computes the same two values with node:crypto, synchronously,
// because the library does it through Web Crypto (an importKey, a digest and a sign, each a trip to
// another thread: about 100 to 200 µs a call by the CPU, against a few µs here). Its spec holds
// both to the library (each accepts what the other makes). What this adds: the parameters must name
// this product (and user, when challenges are bound to one), must not have expired, and must carry
// a difficulty at least the floor in force. Nothing here touches Redis: the single-use claim is the
// caller's, after a solution verified.
import { createHash, createHmac, randomBytes, randomInt, timingSafeEqual } from 'node:crypto';
import { extractParams, Payload } from 'altcha-lib/v1';

/** A solution is refused this many characters early: a real one is about 300. */
export const MAX_SOLUTION_LENGTH = 2048;

/** The parameters a challenge's salt carries. */
export interface ChallengeBinding {
  productId: number;
  /** The user a challenge is bound to (buyer identity on), or null for any. */
  userId: string | null;
  /** The largest secret number (the difficulty). */
  maxNumber: number;
  /** Epoch ms. */
  expiresAt: number;
}

export type Verified = { ok: true; challenge: string; expiresAt: number } | { ok: false; why: string };

export interface Expected {
  productId: number;
  /** The joining user, checked when the challenge names one (and it must name one when `bound`). */
  userId: string;
  /** Challenges must be bound to a user (buyer identity on). */
  bound: boolean;
  /** The least largest-secret-number accepted now. */
  minMaxNumber: number;
  now: number;
}

/** The salt's parameters as this service writes them (createChallenge's `params` and `expires`). */
export function challengeParams(b: Omit<ChallengeBinding, 'expiresAt'>): Record<string, string> {
  return { p: String(b.productId), d: String(b.maxNumber), ...(b.userId !== null ? { u: b.userId } : {}) };
}

/** The header's value (base64 of the JSON payload) as a payload, or null when it is not one. */
export function decodeSolution(raw: string): Payload | null {
  if (raw.length === 0 || raw.length > MAX_SOLUTION_LENGTH) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(raw, 'base64').toString('utf8'));
  } catch {
    return null;
  }
  if (parsed === null || typeof parsed !== 'object') return null;
  const p = parsed as Record<string, unknown>;
  const strings = ['algorithm', 'challenge', 'salt', 'signature'].every((k) => typeof p[k] === 'string');
  if (!strings || p.algorithm !== 'SHA-256') return null;
  if (typeof p.number !== 'number' || !Number.isSafeInteger(p.number) || p.number < 0) return null;
  return {
    algorithm: 'SHA-256',
    challenge: p.challenge,
    number: p.number,
    salt: p.salt,
    signature: p.signature,
  } as Payload;
}

/** A challenge as altcha's v1 scheme writes it (its `createChallenge`), signed with `hmacKey`. */
export function makeChallenge(hmacKey: string, maxNumber: number, expires: Date, params: Record<string, string>) {
  const query = new URLSearchParams(params);
  query.set('expires', String(Math.floor(expires.getTime() / 1000)));
  // The trailing '&' ends the parameters, so none can be spliced onto the salt after signing.
  const salt = `${randomBytes(12).toString('hex')}?${query.toString()}&`;
  const challenge = sha256Hex(salt + randomInt(maxNumber));
  return { algorithm: 'SHA-256' as const, challenge, maxnumber: maxNumber, salt, signature: sign(hmacKey, challenge) };
}

/** Whether the number solves the challenge and the challenge carries this key's signature (altcha's `verifySolution`). */
export function solutionHolds(p: Payload, hmacKey: string): boolean {
  if (sha256Hex(p.salt + p.number) !== p.challenge) return false;
  const wanted = Buffer.from(sign(hmacKey, p.challenge));
  const given = Buffer.from(p.signature);
  return given.length === wanted.length && timingSafeEqual(given, wanted);
}

const sha256Hex = (data: string) => createHash('sha256').update(data).digest('hex');
const sign = (hmacKey: string, challenge: string) => createHmac('sha256', hmacKey).update(challenge).digest('hex');

/** Verifies a decoded solution against what this join expects; `hmacKey` is the challenges' key. */
export function verifyProof(payload: Payload, hmacKey: string, e: Expected): Verified {
  const params = extractParams(payload);
  const productId = Number(params.p);
  const maxNumber = Number(params.d);
  const expiresAt = Number(params.expires) * 1000;
  if (!Number.isSafeInteger(productId) || !Number.isSafeInteger(maxNumber) || !Number.isFinite(expiresAt))
    return { ok: false, why: 'not a challenge of this service' };
  // The signature first: a parameter of a forged payload says nothing.
  if (!solutionHolds(payload, hmacKey)) return { ok: false, why: 'the solution or its signature is wrong' };
  if (expiresAt <= e.now) return { ok: false, why: 'the challenge expired' };
  if (productId !== e.productId) return { ok: false, why: "another product's challenge" };
  if (params.u !== undefined ? params.u !== e.userId : e.bound) return { ok: false, why: "another user's challenge" };
  if (maxNumber < e.minMaxNumber) return { ok: false, why: 'easier than the difficulty in force' };
  return { ok: true, challenge: payload.challenge, expiresAt };
}
