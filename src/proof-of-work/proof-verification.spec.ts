import { createChallenge, Payload, solveChallenge } from 'altcha-lib/v1';
import { challengeParams, decodeSolution, Expected, MAX_SOLUTION_LENGTH, verifyProof } from './proof-verification';

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
    expect(await verifyProof(p, KEY, expected())).toEqual({
      ok: true,
      challenge: p.challenge,
      expiresAt: Math.floor((NOW + 60_000) / 1000) * 1000,
    });
  });

  it('refuses a wrong number, a signature by another key, and a salt changed after signing', async () => {
    const p = await solvedPayload({});
    expect(await verifyProof({ ...p, number: p.number + 1 }, KEY, expected())).toMatchObject({ ok: false });
    expect(await verifyProof(await solvedPayload({ key: 'another-key-of-some-length' }), KEY, expected())).toEqual({
      ok: false,
      why: 'the solution or its signature is wrong',
    });
    const moved = { ...p, salt: p.salt.replace('p=7', 'p=8') };
    expect(await verifyProof(moved, KEY, expected({ productId: 8 }))).toEqual({
      ok: false,
      why: 'the solution or its signature is wrong',
    });
  });

  it('refuses an expired challenge, at the second it expires', async () => {
    const p = await solvedPayload({ expiresAt: NOW + 5000 });
    const expiresAt = Math.floor((NOW + 5000) / 1000) * 1000;
    expect(await verifyProof(p, KEY, expected({ now: expiresAt - 1 }))).toMatchObject({ ok: true });
    expect(await verifyProof(p, KEY, expected({ now: expiresAt }))).toEqual({
      ok: false,
      why: 'the challenge expired',
    });
  });

  it("refuses another product's challenge", async () => {
    expect(await verifyProof(await solvedPayload({ productId: 9 }), KEY, expected())).toEqual({
      ok: false,
      why: "another product's challenge",
    });
  });

  it("refuses another user's challenge, and an unbound one where challenges must be bound", async () => {
    const bound = await solvedPayload({ userId: 'bob' });
    expect(await verifyProof(bound, KEY, expected({ bound: true }))).toEqual({
      ok: false,
      why: "another user's challenge",
    });
    expect(await verifyProof(bound, KEY, expected({ userId: 'bob', bound: true }))).toMatchObject({ ok: true });
    expect(await verifyProof(await solvedPayload({}), KEY, expected({ bound: true }))).toEqual({
      ok: false,
      why: "another user's challenge",
    });
  });

  it('refuses a solution easier than the least difficulty accepted now', async () => {
    const p = await solvedPayload({ maxNumber: 500 });
    expect(await verifyProof(p, KEY, expected({ minMaxNumber: 501 }))).toEqual({
      ok: false,
      why: 'easier than the difficulty in force',
    });
    expect(await verifyProof(p, KEY, expected({ minMaxNumber: 500 }))).toMatchObject({ ok: true });
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
