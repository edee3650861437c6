import { createChallenge, extractParams, Payload, solveChallenge, verifySolution } from 'altcha-lib/v1';
import {
  challengeParams,
  decodeSolution,
  Expected,
  makeChallenge,
  MAX_SOLUTION_LENGTH,
  solutionHolds,
  verifyProof,
} from './proof-verification';

const KEY = 'a-proof-of-work-key-for-the-unit-specs';
const NOW = Date.now();

async function solvedPayload(o: {
  productId?: number;
  userId?: string | null;
  maxNumber?: number;
  expiresAt?: number;
  key?: string;
}) {
  const maxNumber = o.maxNumber ?? 1000;
  const c = await createChallenge({
    hmacKey: o.key ?? KEY,
    maxnumber: maxNumber,
    expires: new Date(o.expiresAt ?? NOW + 60_000),
    params: challengeParams({ productId: o.productId ?? 7, userId: o.userId ?? null, maxNumber }),
  });
  const s = await solveChallenge(c.challenge, c.salt, c.algorithm, maxNumber).promise;
  const payload: Payload = {
    algorithm: c.algorithm,
    challenge: c.challenge,
    number: s!.number,
    salt: c.salt,
    signature: c.signature,
  };
  return payload;
}

const expected = (e: Partial<Expected> = {}): Expected => ({
  productId: 7,
  userId: 'ann',
  bound: false,
  minMaxNumber: 1000,
  now: NOW,
  ...e,
});
const encode = (p: unknown) => Buffer.from(JSON.stringify(p)).toString('base64');

describe('verifyProof', () => {
  it('accepts a solution of this product, unexpired, at the difficulty in force, and names its challenge', async () => {
    const p = await solvedPayload({});
    expect(verifyProof(p, KEY, expected())).toEqual({
      ok: true,
      challenge: p.challenge,
      expiresAt: Math.floor((NOW + 60_000) / 1000) * 1000,
    });
  });

  it('refuses a wrong number, a signature by another key, and a salt changed after signing', async () => {
    const p = await solvedPayload({});
    expect(verifyProof({ ...p, number: p.number + 1 }, KEY, expected())).toMatchObject({ ok: false });
    expect(verifyProof(await solvedPayload({ key: 'another-key-of-some-length' }), KEY, expected())).toEqual({
      ok: false,
      why: 'the solution or its signature is wrong',
    });
    const moved = { ...p, salt: p.salt.replace('p=7', 'p=8') };
    expect(verifyProof(moved, KEY, expected({ productId: 8 }))).toEqual({
      ok: false,
      why: 'the solution or its signature is wrong',
    });
  });

  it('refuses an expired challenge, at the second it expires', async () => {
    const p = await solvedPayload({ expiresAt: NOW + 5000 });
    const expiresAt = Math.floor((NOW + 5000) / 1000) * 1000;
    expect(verifyProof(p, KEY, expected({ now: expiresAt - 1 }))).toMatchObject({ ok: true });
    expect(verifyProof(p, KEY, expected({ now: expiresAt }))).toEqual({
      ok: false,
      why: 'the challenge expired',
    });
  });

  it("refuses another product's challenge", async () => {
    expect(verifyProof(await solvedPayload({ productId: 9 }), KEY, expected())).toEqual({
      ok: false,
      why: "another product's challenge",
    });
  });

  it("refuses another user's challenge, and an unbound one where challenges must be bound", async () => {
    const bound = await solvedPayload({ userId: 'bob' });
    expect(verifyProof(bound, KEY, expected({ bound: true }))).toEqual({
      ok: false,
      why: "another user's challenge",
    });
    expect(verifyProof(bound, KEY, expected({ userId: 'bob', bound: true }))).toMatchObject({ ok: true });
    expect(verifyProof(await solvedPayload({}), KEY, expected({ bound: true }))).toEqual({
      ok: false,
      why: "another user's challenge",
    });
  });

  it('refuses a solution easier than the least difficulty accepted now', async () => {
    const p = await solvedPayload({ maxNumber: 500 });
    expect(verifyProof(p, KEY, expected({ minMaxNumber: 501 }))).toEqual({
      ok: false,
      why: 'easier than the difficulty in force',
    });
    expect(verifyProof(p, KEY, expected({ minMaxNumber: 500 }))).toMatchObject({ ok: true });
  });
});

describe('decodeSolution', () => {
  it('reads the base64 JSON payload and refuses anything else', async () => {
    const p = await solvedPayload({});
    expect(decodeSolution(encode(p))).toEqual(p);
    for (const bad of [
      '',
      'not base64 json',
      encode([1, 2]),
      encode({ ...p, number: -1 }),
      encode({ ...p, number: 1.5 }),
      encode({ ...p, algorithm: 'SHA-1' }),
      encode({ ...p, salt: 5 }),
      'A'.repeat(MAX_SOLUTION_LENGTH + 1),
    ])
      expect(decodeSolution(bad)).toBeNull();
  });
});

// The two values are computed here with node:crypto; altcha-lib, which the buyer's page solves with,
// is the reference: each side accepts what the other makes, and both refuse the same tampering.
describe('the challenge scheme against altcha-lib', () => {
  const solve = async (c: { challenge: string; salt: string; maxnumber: number }) =>
    (await solveChallenge(c.challenge, c.salt, 'SHA-256', c.maxnumber).promise)!.number;

  it("makes challenges that altcha-lib solves and verifies, with this service's parameters in the salt", async () => {
    const expires = new Date(NOW + 60_000);
    for (let i = 0; i < 20; i++) {
      const c = makeChallenge(KEY, 1000, expires, challengeParams({ productId: 7, userId: 'ann', maxNumber: 1000 }));
      expect(c).toMatchObject({ algorithm: 'SHA-256', maxnumber: 1000 });
      const payload: Payload = { ...c, number: await solve(c) };
      expect(await verifySolution(payload, KEY, true)).toBe(true);
      expect(solutionHolds(payload, KEY)).toBe(true);
      expect(extractParams(payload)).toEqual({
        p: '7',
        d: '1000',
        u: 'ann',
        expires: String(Math.floor((NOW + 60_000) / 1000)),
      });
    }
  });

  it("accepts altcha-lib's own challenges, solved", async () => {
    for (let i = 0; i < 20; i++) expect(solutionHolds(await solvedPayload({}), KEY)).toBe(true);
  });

  it('refuses what altcha-lib refuses: another number, salt, challenge, signature or key', async () => {
    const p = await solvedPayload({});
    const flip = (hex: string) => (hex[0] === 'a' ? 'b' : 'a') + hex.slice(1);
    const tampered: Array<[Payload, string]> = [
      [{ ...p, number: p.number + 1 }, KEY],
      [{ ...p, salt: p.salt.replace('p=7', 'p=8') }, KEY],
      [{ ...p, challenge: flip(p.challenge) }, KEY],
      [{ ...p, signature: flip(p.signature) }, KEY],
      [{ ...p, signature: p.signature.toUpperCase() }, KEY],
      [{ ...p, signature: `${p.signature}00` }, KEY],
      [{ ...p, signature: p.signature.slice(0, 62) }, KEY],
      [p, 'another-key-of-some-length'],
    ];
    for (const [payload, key] of tampered) {
      expect(await verifySolution(payload, key, false)).toBe(false);
      expect(solutionHolds(payload, key)).toBe(false);
    }
  });
});
