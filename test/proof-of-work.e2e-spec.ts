// Proof of work at the queue, against two service processes on one PostgreSQL and one Redis (and a
// third with buyer identity on): a product without it joins as before; with it, a join needs a
// solved challenge of that product, used once across both processes. Every hostile solution (none,
// garbage, forged, expired, replayed on the other process, another product's, another user's,
// easier than the difficulty in force) is refused with 403 and changes nothing: no claim is written
// and the user's later valid join is the one that makes their ticket (201). Solving does not
// change the pre-queue's lottery: the drawn order is the one recomputed from the seed.
import type { IssuedChallenge } from '../src/proof-of-work/proof-of-work.service';
import { createSigner } from 'fast-jwt';
import Redis from 'ioredis';
import { createChallenge, solveChallenge } from 'altcha-lib/v1';
import { waitFor } from './support/wait';
import { resetState } from './support/database';
import { admin, Reply, request, ServiceProcess, startedTogether, startService, testUrls } from './support/service';
import { openSaleNow, recomputeLottery } from './support/waiting-room';

const POW_SECRET = 'proof-of-work-secret-for-the-specs-0123456789';
const BUYER_SECRET = 'buyer-secret-for-the-specs-0123456789abcdef';
// Small steps keep the specs' solving quick; a level no spec reaches keeps the difficulty at rest.
const env = {
  POW_SECRET,
  POW_STEPS: '2000,4000,8000',
  POW_JOINS_PER_S: '100000',
  ADMISSION_TICK_MS: '50',
  LIVE_STATS_MS: '0',
};

/** A challenge as the route answers it: the service's own shape, and whether the product requires one. */
type Challenge = IssuedChallenge & { required: boolean };

const encode = (c: Pick<Challenge, 'algorithm' | 'challenge' | 'salt' | 'signature'>, number: number) =>
  Buffer.from(
    JSON.stringify({ algorithm: c.algorithm, challenge: c.challenge, number, salt: c.salt, signature: c.signature }),
  ).toString('base64');

async function solved(c: Pick<Challenge, 'algorithm' | 'challenge' | 'salt' | 'signature' | 'maxnumber'>) {
  const s = await solveChallenge(c.challenge, c.salt, c.algorithm, c.maxnumber).promise;
  if (s === null) throw new Error('no solution found');
  return { header: encode(c, s.number), number: s.number };
}

function expectError(res: Reply, status: number, code: string): void {
  expect({ status: res.status, code: res.body?.code, message: res.body?.message }).toEqual({
    status,
    code,
    message: expect.any(String),
  });
}

describe('proof of work at the queue, across two processes', () => {
  let a: ServiceProcess;
  let b: ServiceProcess;
  let redis: Redis;

  const product = async (body: Record<string, unknown>) => {
    const r = await request(a.url, 'POST', '/admin/products', { name: 'pow', stock: 5, segments: 2, ...body }, admin);
    if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`);
    return r.body as { id: number; proofOfWork: boolean; continueUrl: string | null };
  };
  const challenge = async (base: string, productId: number, headers: Record<string, string> = {}) => {
    const r = await request<Challenge>(base, 'GET', `/products/${productId}/queue/challenge`, undefined, headers);
    expect(r.status).toBe(200);
    expect(r.headers['cache-control']).toBe('no-store');
    return r.body;
  };
  const join = (
    base: string,
    productId: number,
    userId: string,
    proof?: string,
    headers: Record<string, string> = {},
  ) =>
    request(
      base,
      'POST',
      `/products/${productId}/queue`,
      { userId },
      {
        ...headers,
        ...(proof !== undefined ? { 'x-proof-of-work': proof } : {}),
      },
    );
  const claims = async () => (await redis.keys('pow:used:*')).length;

  beforeAll(async () => {
    await resetState();
    redis = new Redis(testUrls().redisUrl);
    [a, b] = await startedTogether([startService(env), startService(env)]);
  });
  afterAll(async () => {
    redis?.disconnect();
    await Promise.all([a?.stop(), b?.stop()]);
  });

  it('is off by default: a product without it is joined with no solution, as before', async () => {
    const p = await product({ waitingRoom: true });
    expect(p).toMatchObject({ proofOfWork: false, continueUrl: null });
    const r = await join(b.url, p.id, 'plain-1');
    expect(r.status).toBe(201);
    // A challenge is still given (the page asks before it knows), saying that none is required.
    expect(await challenge(a.url, p.id)).toMatchObject({ required: false, step: 0, maxnumber: 2000 });
  });

  it('is set on create and by PATCH, with the shop URL; bad values are refused with 400', async () => {
    const p = await product({ waitingRoom: true, proofOfWork: true, continueUrl: 'https://shop.example/buy/1' });
    expect(p).toMatchObject({ proofOfWork: true, continueUrl: 'https://shop.example/buy/1' });
    const off = await request(
      a.url,
      'PATCH',
      `/admin/products/${p.id}`,
      { proofOfWork: false, continueUrl: null },
      admin,
    );
    expect(off.body).toMatchObject({ proofOfWork: false, continueUrl: null });
    for (const bad of [{ proofOfWork: 'yes' }, { continueUrl: 'javascript:alert(1)' }, { continueUrl: 'not a url' }]) {
      const r = await request(a.url, 'PATCH', `/admin/products/${p.id}`, bad, admin);
      expectError(r, 400, 'VALIDATION_FAILED');
    }
    const back = await request(a.url, 'PATCH', `/admin/products/${p.id}`, { proofOfWork: true }, admin);
    expect(back.body).toMatchObject({ proofOfWork: true, continueUrl: null });
  });

  it('refuses every hostile solution with 403 and changes nothing, then takes a valid one once across both processes', async () => {
    const p = await product({ waitingRoom: true, proofOfWork: true });
    const other = await product({ waitingRoom: true, proofOfWork: true });
    const before = await claims();

    // None.
    expectError(await join(a.url, p.id, 'eve'), 403, 'PROOF_REQUIRED');
    expectError(await join(b.url, p.id, 'eve', ''), 403, 'PROOF_REQUIRED');
    // Not a solution at all.
    expectError(await join(a.url, p.id, 'eve', 'bm90IGEgc29sdXRpb24='), 403, 'PROOF_INVALID');
    expectError(await join(a.url, p.id, 'eve', 'x'.repeat(5000)), 403, 'PROOF_INVALID');

    const c = await challenge(a.url, p.id);
    expect(c).toMatchObject({ algorithm: 'SHA-256', maxnumber: 2000, step: 0, required: true });
    expect(Date.parse(c.expiresAt)).toBeGreaterThan(Date.now() + 60_000);
    const good = await solved(c);
    // Forged: a wrong number, a signature of our own, a salt naming another product.
    expectError(await join(a.url, p.id, 'eve', encode(c, good.number + 1)), 403, 'PROOF_INVALID');
    expectError(
      await join(b.url, p.id, 'eve', encode({ ...c, signature: 'f'.repeat(64) }, good.number)),
      403,
      'PROOF_INVALID',
    );
    expectError(
      await join(b.url, p.id, 'eve', encode({ ...c, salt: c.salt.replace(`p=${p.id}`, `p=${other.id}`) }, good.number)),
      403,
      'PROOF_INVALID',
    );
    // Expired: a challenge made with the service's key, expired a second ago, solved.
    const expired = await createChallenge({
      hmacKey: POW_SECRET,
      maxnumber: 2000,
      expires: new Date(Date.now() - 1000),
      params: { p: String(p.id), d: '2000' },
    });
    const expiredReply = await join(a.url, p.id, 'eve', (await solved({ ...expired, maxnumber: 2000 })).header);
    expectError(expiredReply, 403, 'PROOF_INVALID');
    expect(expiredReply.body.message).toContain('expired');
    // Easier than the difficulty in force: genuine (the service's key), but at 500 where 2000 is the least.
    const easy = await createChallenge({
      hmacKey: POW_SECRET,
      maxnumber: 500,
      expires: new Date(Date.now() + 60_000),
      params: { p: String(p.id), d: '500' },
    });
    const easyReply = await join(b.url, p.id, 'eve', (await solved({ ...easy, maxnumber: 500 })).header);
    expectError(easyReply, 403, 'PROOF_INVALID');
    expect(easyReply.body.message).toContain('easier than the difficulty in force');
    // Another product's challenge, solved.
    const theirs = await solved(await challenge(b.url, other.id));
    const theirsReply = await join(a.url, p.id, 'eve', theirs.header);
    expectError(theirsReply, 403, 'PROOF_INVALID');
    expect(theirsReply.body.message).toContain("another product's challenge");

    // Nothing of these was claimed, and eve has no ticket: her first valid join makes it (201).
    expect(await claims()).toBe(before);
    const first = await join(a.url, p.id, 'eve', good.header);
    expect(first.status).toBe(201);
    expect(await claims()).toBe(before + 1);

    // Replayed on the other process (for another user, and for eve again): used already.
    const replay = await join(b.url, p.id, 'mallory', good.header);
    expectError(replay, 403, 'PROOF_INVALID');
    expect(replay.body.message).toContain('used already');
    expectError(await join(b.url, p.id, 'eve', good.header), 403, 'PROOF_INVALID');
    expectError(await join(a.url, p.id, 'mallory', good.header), 403, 'PROOF_INVALID');
    expect(await claims()).toBe(before + 1);
    // mallory has no ticket either: her own solution makes one (201); eve's next join (a new solution) answers her ticket (200).
    const m = await join(b.url, p.id, 'mallory', (await solved(await challenge(b.url, p.id))).header);
    expect(m.status).toBe(201);
    const again = await join(b.url, p.id, 'eve', (await solved(await challenge(a.url, p.id))).header);
    expect(again.status).toBe(200);
    expect(again.body.id).toBe(first.body.id);
    // Counted: each process's /metrics, summed (this spec's products alone use proof of work so far).
    const outcomes = async (outcome: string) => {
      let sum = 0;
      for (const base of [a.url, b.url]) {
        const text = (await request(base, 'GET', '/metrics')).text;
        const m = new RegExp(`^flashsale_proof_of_work_total\\{outcome="${outcome}"\\} (\\d+)`, 'm').exec(text);
        sum += m ? Number(m[1]) : 0;
      }
      return sum;
    };
    expect(await outcomes('required')).toBe(2);
    expect(await outcomes('replayed')).toBe(3);
    expect(await outcomes('accepted')).toBe(3);
    expect(await outcomes('invalid')).toBe(8);
  });

  it('claims a solution once when two processes are sent it at the same moment', async () => {
    const p = await product({ waitingRoom: true, proofOfWork: true });
    for (let round = 0; round < 5; round++) {
      const s = await solved(await challenge(a.url, p.id));
      const replies = await Promise.all([
        join(a.url, p.id, `race-${round}-a`, s.header),
        join(b.url, p.id, `race-${round}-b`, s.header),
        join(a.url, p.id, `race-${round}-c`, s.header),
        join(b.url, p.id, `race-${round}-d`, s.header),
      ]);
      expect(replies.map((r) => r.status).sort()).toEqual([201, 403, 403, 403]);
      for (const r of replies.filter((x) => x.status === 403)) expect(r.body.code).toBe('PROOF_INVALID');
    }
  });

  it('leaves the pre-queue lottery as drawn from the seed, whatever order the buyers solved and joined in', async () => {
    // The sale opens once every buyer has solved and joined (openSaleNow), however long solving takes here.
    const startsAt = new Date(Date.now() + 3_600_000).toISOString();
    const p = await product({ waitingRoom: true, proofOfWork: true, startsAt, stock: 20 });
    const users = Array.from({ length: 8 }, (_, i) => `lot-${i}`);
    const ids: string[] = [];
    const lotteryIds: string[] = [];
    for (const [i, u] of users.entries()) {
      const s = await solved(await challenge(i % 2 ? a.url : b.url, p.id));
      const r = await join(i % 2 ? b.url : a.url, p.id, u, s.header);
      expect(r.status).toBe(201);
      expect(r.body.position).toBeNull();
      ids.push(r.body.id);
      lotteryIds.push(r.body.lotteryId);
    }
    await openSaleNow([a.url, b.url], p.id, ids[0]);
    const positions = await waitFor(
      'the draw',
      async () => {
        const rs = await Promise.all(
          ids.map((id, i) => request(i % 2 ? a.url : b.url, 'GET', `/products/${p.id}/queue/${id}`)),
        );
        return rs.every((r) => r.body.position !== null) ? rs.map((r) => r.body.position as number) : null;
      },
      30_000,
      200,
    );
    const fairness = await request(a.url, 'GET', `/products/${p.id}/queue/fairness`);
    const byPosition = lotteryIds.map((id, i) => ({ id, pos: positions[i] })).sort((x, y) => x.pos - y.pos);
    expect(byPosition.map((x) => x.pos)).toEqual(users.map((_, i) => i + 1));
    expect(byPosition.map((x) => x.id)).toEqual(recomputeLottery(fairness.body.seed, lotteryIds));
  });

  describe('with a low level of joins per second', () => {
    let d: ServiceProcess;

    beforeAll(async () => {
      d = await startService({ ...env, POW_JOINS_PER_S: '2', POW_EASE_S: '3' });
    });
    afterAll(() => d?.stop());

    it('makes new challenges harder while joins come faster than the level (refused ones do not count), refuses one two steps easier, and eases after', async () => {
      const p = await product({ waitingRoom: true, proofOfWork: true });
      expect(await challenge(d.url, p.id)).toMatchObject({ step: 0, maxnumber: 2000 });
      // A refusal changes nothing: 120 joins without a solution leave the door as easy as it was.
      const refused = await Promise.all(Array.from({ length: 120 }, (_, i) => join(d.url, p.id, `flood-${i}`)));
      expect(refused.filter((r) => r.status !== 403 || r.body.code !== 'PROOF_REQUIRED')).toEqual([]);
      expect(await challenge(d.url, p.id)).toMatchObject({ step: 0, maxnumber: 2000 });
      // Joins with solutions, faster than twice the level, raise it to the last step.
      let crowd = 0;
      const raised = await waitFor(
        'the last step',
        async () => {
          const proofs = await Promise.all(
            Array.from({ length: 8 }, async () => (await solved(await challenge(d.url, p.id))).header),
          );
          const joins = await Promise.all(proofs.map((proof) => join(d.url, p.id, `crowd-${crowd++}`, proof)));
          expect(joins.map((r) => r.status).filter((s) => s !== 201)).toEqual([]);
          const c = await challenge(d.url, p.id);
          return c.step === 2 ? c : null;
        },
        60_000,
        10,
      );
      expect(raised.maxnumber).toBe(8000);
      // A genuine challenge at the first step: two steps below the one in force, too easy.
      const old = await createChallenge({
        hmacKey: POW_SECRET,
        maxnumber: 2000,
        expires: new Date(Date.now() + 60_000),
        params: { p: String(p.id), d: '2000' },
      });
      const easy = await join(d.url, p.id, 'late', (await solved({ ...old, maxnumber: 2000 })).header);
      expectError(easy, 403, 'PROOF_INVALID');
      expect(easy.body.message).toContain('easier than the difficulty in force');
      // The raised challenge is taken.
      expect((await join(d.url, p.id, 'late', (await solved(raised)).header)).status).toBe(201);
      // Without joins the step comes down, one step every POW_EASE_S, to rest.
      await waitFor('rest', async () => (await challenge(d.url, p.id)).step === 0, 60_000, 250);
      expect((await join(d.url, p.id, 'later', (await solved(await challenge(d.url, p.id))).header)).status).toBe(201);
    });
  });

  describe('with buyer identity on', () => {
    let c: ServiceProcess;
    const token = (sub: string) =>
      createSigner({ key: Buffer.from(BUYER_SECRET), algorithm: 'HS256', expiresIn: 60_000 })({ sub });
    const as = (sub: string) => ({ authorization: `Bearer ${token(sub)}` });

    beforeAll(async () => {
      // The door's budgets on here (the other processes run without them, as most specs do), and
      // the product's terms kept for the whole spec: the door checks a solution before the budgets
      // only with the terms cached (else after them, so that a 429 reads no PostgreSQL).
      c = await startService({
        ...env,
        BUYER_JWT_SECRET: BUYER_SECRET,
        RATE_LIMIT_USER: '1000,1000',
        RATE_LIMIT_IP: '1000,1000',
        PRODUCT_CACHE_MS: '60000',
      });
    });
    afterAll(() => c?.stop());

    it("binds a challenge to the buyer: another buyer's solution is refused, the buyer's own is taken", async () => {
      const p = await product({ waitingRoom: true, proofOfWork: true });
      const unauthenticated = await request(c.url, 'GET', `/products/${p.id}/queue/challenge`);
      expectError(unauthenticated, 401, 'UNAUTHENTICATED');
      const ann = await challenge(c.url, p.id, as('ann'));
      expect(ann.salt).toContain('u=ann');
      const s = await solved(ann);
      const before = await claims();
      const stolen = await join(c.url, p.id, 'bob', s.header, as('bob'));
      expectError(stolen, 403, 'PROOF_INVALID');
      expect(stolen.body.message).toContain("another user's challenge");
      // A challenge made while identity was off names no user: refused where challenges must.
      const unbound = await solved(await challenge(a.url, p.id));
      expectError(await join(c.url, p.id, 'bob', unbound.header, as('bob')), 403, 'PROOF_INVALID');
      expect(await claims()).toBe(before);
      expect((await join(c.url, p.id, 'ann', s.header, as('ann'))).status).toBe(201);
    });

    it('refuses without any Redis command (before the rate limits), and a valid join claims with one SET NX PX after them', async () => {
      const p = await product({ waitingRoom: true, proofOfWork: true });
      // (The challenge below puts the product's terms in c's cache.)
      const c1 = await challenge(c.url, p.id, as('cy'));
      const s = await solved(c1);
      const stranger = await solved(await challenge(c.url, p.id, as('dee')));
      const monitor = await redis.monitor();
      const seen: string[][] = [];
      monitor.on('monitor', (_time: string, args: string[]) => seen.push(args));
      // Only this buyer's budget key and claim keys: the Redis is shared with whatever else is running.
      const touching = () => seen.filter((args) => args.some((a) => a === 'rl:user:cy' || a.startsWith('pow:')));
      try {
        expectError(await join(c.url, p.id, 'cy', undefined, as('cy')), 403, 'PROOF_REQUIRED');
        expectError(await join(c.url, p.id, 'cy', encode(c1, s.number + 1), as('cy')), 403, 'PROOF_INVALID');
        expectError(await join(c.url, p.id, 'cy', stranger.header, as('cy')), 403, 'PROOF_INVALID');
        // The monitor's stream is ordered: a marker command after the refusals shows they were all seen.
        await redis.echo('after-refusals');
        await waitFor('the marker', () => seen.some((args) => args[1] === 'after-refusals'));
        expect(touching()).toEqual([]);
        expect((await join(c.url, p.id, 'cy', s.header, as('cy'))).status).toBe(201);
        await redis.echo('after-join');
        await waitFor('the marker', () => seen.some((args) => args[1] === 'after-join'));
        const claimsMade = touching().filter((args) => args.some((a) => a.startsWith('pow:')));
        expect(claimsMade).toEqual([['set', `pow:used:${c1.challenge}`, '1', 'PX', expect.any(String), 'NX']]);
        // The budgets were counted for the join that went through (they are on in this process).
        expect(touching().some((args) => args.includes('rl:user:cy'))).toBe(true);
      } finally {
        monitor.disconnect();
      }
    });
  });
});
