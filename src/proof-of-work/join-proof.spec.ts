// The join's check counts towards the difficulty only the joins it lets in: joins refused for
// having no solution, a forged one or a used one change nothing, the step included.
import type { FastifyRequest } from 'fastify';
import { solveChallenge } from 'altcha-lib/v1';
import { DomainError } from '../common/domain-errors';
import type { ProductCatalogService } from '../inventory/product-catalog.service';
import type { ProductInfo } from '../inventory/product.types';
import { JoinProof, PROOF_HEADER } from './join-proof';
import { IssuedChallenge, ProofOfWorkService } from './proof-of-work.service';

const T = 1_800_000_000_000;
const P = 7;
const product: ProductInfo = {
  id: P,
  name: 'Sneaker',
  limitPerUser: 1,
  segmentCount: 1,
  layoutVersion: 1,
  startsAt: null,
  endsAt: null,
  waitingRoom: true,
  admissionTtlS: 120,
  proofOfWork: true,
};

function door() {
  const claimed = new Set<string>();
  const redis = { set: async (key: string) => (claimed.has(key) ? null : (claimed.add(key), 'OK')) };
  const metrics = { proofOfWork: { inc: () => undefined }, proofOfWorkStep: { set: () => undefined } };
  const pow = new ProofOfWorkService(
    {
      secret: 'a-proof-of-work-key-for-the-unit-specs',
      challengeTtlS: 120,
      joinsPerS: 2,
      steps: [50, 100, 200],
      easeS: 10,
    },
    { retryAfterS: 1 } as never,
    {} as never,
    {} as never,
    redis as never,
    metrics as never,
  );
  const catalog = { peek: () => product, get: async () => product } as unknown as ProductCatalogService;
  return { pow, proofs: new JoinProof(pow, catalog) };
}

const joinOf = (proof?: string) =>
  ({ params: { id: String(P) }, headers: proof === undefined ? {} : { [PROOF_HEADER]: proof } }) as FastifyRequest;

async function solution(c: IssuedChallenge): Promise<string> {
  const s = await solveChallenge(c.challenge, c.salt, c.algorithm, c.maxnumber).promise;
  const { algorithm, challenge, salt, signature } = c;
  return Buffer.from(JSON.stringify({ algorithm, challenge, number: s!.number, salt, signature })).toString('base64');
}

/** The code a join is refused with, or 'let in' once its solution is claimed. */
async function outcome(proofs: JoinProof, proof: string | undefined, userId: string): Promise<string> {
  try {
    const claim = await proofs.check(joinOf(proof), userId);
    await claim?.();
    return 'let in';
  } catch (err) {
    if (err instanceof DomainError) return err.code;
    throw err;
  }
}

describe('JoinProof', () => {
  beforeEach(() => jest.spyOn(Date, 'now').mockReturnValue(T));
  afterEach(() => jest.restoreAllMocks());

  it('counts no refused join: a flood without a valid solution leaves the step at rest', async () => {
    const { pow, proofs } = door();
    await pow.onModuleInit();
    const used = await solution(pow.issue(P, null));
    expect(await outcome(proofs, used, 'first')).toBe('let in');
    const refused: string[] = [];
    for (let i = 0; i < 40; i++) {
      refused.push(await outcome(proofs, undefined, `none-${i}`));
      refused.push(await outcome(proofs, 'not-a-solution', `garbage-${i}`));
      refused.push(await outcome(proofs, used, `replay-${i}`));
    }
    expect(new Set(refused)).toEqual(new Set(['PROOF_REQUIRED', 'PROOF_INVALID']));
    expect(refused).toHaveLength(120);
    expect(pow.difficulty.current(P, T)).toEqual({ step: 0, maxNumber: 50 });
  });

  it('counts the joins it lets in: above the level the step rises', async () => {
    const { pow, proofs } = door();
    await pow.onModuleInit();
    for (let i = 0; i < 5; i++)
      expect(await outcome(proofs, await solution(pow.issue(P, null)), `buyer-${i}`)).toBe('let in');
    // 5 joins in the second against a level of 2: over twice the level, the last step.
    expect(pow.difficulty.current(P, T)).toEqual({ step: 2, maxNumber: 200 });
  });
});
