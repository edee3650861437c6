// Proof of work at the queue: challenges bound to a product (and to the user when buyer identity is
// on), expiring, at the difficulty in force; a join's solution verified in memory, then claimed once
// across every process with one Redis command (SET NX PX): the first claim wins, a replay finds the
// key. The difficulty follows the joins this process sees (difficulty.ts). docs/proof-of-work.md.
import { randomBytes } from 'node:crypto';
import { Inject, Injectable, OnModuleInit } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { HttpConfig, IdentityConfig, ProofOfWorkConfig, ResolvedIdentityConfig } from '../config/app-config';
import { ProofInvalidError, UnavailableError } from '../common/domain-errors';
import { REDIS_CLIENT, RedisClient } from '../infrastructure/redis.providers';
import { MetricsService } from '../metrics/metrics.service';
import { AdaptiveDifficulty } from './difficulty';
import { challengeParams, decodeSolution, makeChallenge, verifyProof } from './proof-verification';

/** A challenge as GET /products/:id/queue/challenge answers it: altcha's fields, plus when it expires and the step. */
export interface IssuedChallenge {
  algorithm: string;
  challenge: string;
  maxnumber: number;
  salt: string;
  signature: string;
  expiresAt: string;
  /** The difficulty's step in force (0 = at rest). */
  step: number;
}

/** A solution that verified, not yet claimed. */
export interface VerifiedSolution {
  challenge: string;
  /** Epoch ms. */
  expiresAt: number;
}

/** The claimed solutions' keys; one per challenge, gone when the challenge has expired. */
export const claimKey = (challenge: string) => `pow:used:${challenge}`;
/** A claim outlives its challenge by this much, so that no clock skew between processes reopens it. */
const CLAIM_MARGIN_MS = 5000;

@Injectable()
export class ProofOfWorkService implements OnModuleInit {
  private key: string | null = null;
  readonly difficulty: AdaptiveDifficulty;
  /** Challenges are bound to the user (buyer identity on). */
  readonly bound: boolean;

  constructor(
    private readonly config: ProofOfWorkConfig,
    private readonly http: HttpConfig,
    @Inject(IdentityConfig) identity: ResolvedIdentityConfig,
    private readonly db: DataSource,
    @Inject(REDIS_CLIENT) private readonly redis: RedisClient,
    private readonly metrics: MetricsService,
  ) {
    this.difficulty = new AdaptiveDifficulty(config);
    this.bound = Boolean(identity.jwtSecret || identity.jwtPublicKey);
  }

  async onModuleInit(): Promise<void> {
    this.key = this.config.secret ?? (await this.sharedKey());
  }

  private get hmacKey(): string {
    if (this.key === null) throw new Error('the proof-of-work key is not loaded yet');
    return this.key;
  }

  /** Counted when a join of a proof-of-work product carried no solution. */
  required(): void {
    this.metrics.proofOfWork.inc({ outcome: 'required' });
  }

  /** A new challenge for the product (and user), at the difficulty in force now. */
  issue(productId: number, userId: string | null, now = Date.now()): IssuedChallenge {
    const { step, maxNumber } = this.difficulty.current(productId, now);
    this.metrics.proofOfWorkStep.set({ product: String(productId) }, step);
    const expires = new Date(now + this.config.challengeTtlS * 1000);
    const c = makeChallenge(
      this.hmacKey,
      maxNumber,
      expires,
      challengeParams({ productId, userId: this.bound ? userId : null, maxNumber }),
    );
    return {
      algorithm: c.algorithm,
      challenge: c.challenge,
      maxnumber: maxNumber,
      salt: c.salt,
      signature: c.signature,
      // The salt carries whole seconds.
      expiresAt: new Date(Math.floor(expires.getTime() / 1000) * 1000).toISOString(),
      step,
    };
  }

  /**
   * Checks a join's solution (the X-Proof-Of-Work header) in memory: PROOF_INVALID for anything but
   * a valid, current solution of this product's (and user's) challenge. Whether it was used already
   * is the claim's to say.
   */
  verify(raw: string, productId: number, userId: string, now = Date.now()): VerifiedSolution {
    const payload = decodeSolution(raw);
    if (payload === null) {
      this.metrics.proofOfWork.inc({ outcome: 'invalid' });
      throw new ProofInvalidError('not a solution (base64 of the solved challenge as JSON)');
    }
    const verified = verifyProof(payload, this.hmacKey, {
      productId,
      userId,
      bound: this.bound,
      minMaxNumber: this.difficulty.floor(productId, now),
      now,
    });
    if (!verified.ok) {
      this.metrics.proofOfWork.inc({ outcome: 'invalid' });
      throw new ProofInvalidError(verified.why);
    }
    return { challenge: verified.challenge, expiresAt: verified.expiresAt };
  }

  /** Claims a verified solution once across every process: one SET NX PX; PROOF_INVALID when it was claimed before. */
  async claim(v: VerifiedSolution, now = Date.now()): Promise<void> {
    let claimed: string | null;
    try {
      claimed = await this.redis.set(
        claimKey(v.challenge),
        '1',
        'PX',
        Math.max(1, v.expiresAt - now) + CLAIM_MARGIN_MS,
        'NX',
      );
    } catch (err) {
      throw new UnavailableError('redis', this.http.retryAfterS, err);
    }
    this.metrics.proofOfWork.inc({ outcome: claimed === 'OK' ? 'accepted' : 'replayed' });
    if (claimed !== 'OK') throw new ProofInvalidError('this solution was used already');
  }

  /** The challenges' key when the operator set none: made by the first process to ask, then shared. */
  private async sharedKey(): Promise<string> {
    const name = 'proof-of-work-key';
    await this.db.query(`INSERT INTO service_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, [
      name,
      randomBytes(32),
    ]);
    const rows: Array<{ value: Buffer }> = await this.db.query(`SELECT value FROM service_secrets WHERE name = $1`, [
      name,
    ]);
    return rows[0].value.toString('hex');
  }
}
