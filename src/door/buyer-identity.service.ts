// Buyer identity: with BUYER_JWT_SECRET (HS256) or BUYER_JWT_PUBLIC_KEY (RS256 or ES256) set, a
// buyer call carries a JWT whose `sub` is the user. Verified with jose; the algorithm is fixed by
// the key that is configured, never taken from the token (so `alg: none`, or an HS256 token
// signed with the public key as its secret, are refused like any bad signature).
import { createPublicKey, createSecretKey, KeyObject } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import { jwtVerify } from 'jose';
import { IdentityConfig, ResolvedIdentityConfig } from '../config/app-config';
import { UnauthenticatedError } from '../common/domain-errors';
import { USER_ID_PATTERN } from '../common/ids';

/** Longer tokens are refused before any parsing (a buyer token is a few hundred bytes). */
export const MAX_TOKEN_LENGTH = 4096;
/** Clock skew allowed between the token's issuer and this service, for exp and nbf. */
export const CLOCK_TOLERANCE_S = 5;

/** The verification key and its one algorithm, from the configuration; null when identity is off. */
export function buyerKey(config: Pick<IdentityConfig, 'jwtSecret' | 'jwtPublicKey'>): { key: KeyObject; algorithm: string } | null {
  if (config.jwtSecret) return { key: createSecretKey(Buffer.from(config.jwtSecret, 'utf8')), algorithm: 'HS256' };
  if (!config.jwtPublicKey) return null;
  // A PEM given in one line with literal \n (as many secret stores hold it) is read as lines.
  const key = createPublicKey(config.jwtPublicKey.replace(/\\n/g, '\n'));
  if (key.asymmetricKeyType === 'rsa') return { key, algorithm: 'RS256' };
  if (key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1') return { key, algorithm: 'ES256' };
  throw new Error('BUYER_JWT_PUBLIC_KEY must be an RSA key (RS256) or an EC P-256 key (ES256)');
}

@Injectable()
export class BuyerIdentity {
  private readonly verifier: { key: KeyObject; algorithm: string } | null;

  constructor(@Inject(IdentityConfig) config: ResolvedIdentityConfig) {
    this.verifier = buyerKey(config);
  }

  /** Whether buyer calls need a verified token (else POST /orders trusts its body's userId). */
  get enabled(): boolean {
    return this.verifier !== null;
  }

  /** The user a buyer token names; UnauthenticatedError for anything else. */
  async userOf(token: string | null): Promise<string> {
    if (this.verifier === null) throw new UnauthenticatedError('buyer tokens are not configured');
    if (token === null) throw new UnauthenticatedError('a buyer bearer token is required');
    if (token.length > MAX_TOKEN_LENGTH) throw new UnauthenticatedError(`the bearer token is longer than ${MAX_TOKEN_LENGTH} characters`);
    let sub: unknown;
    try {
      const { payload } = await jwtVerify(token, this.verifier.key, {
        algorithms: [this.verifier.algorithm],
        requiredClaims: ['sub', 'exp'],
        clockTolerance: CLOCK_TOLERANCE_S,
      });
      sub = payload.sub;
    } catch (err) {
      throw new UnauthenticatedError(`the buyer token is not valid: ${reason(err)}`);
    }
    if (typeof sub !== 'string' || !USER_ID_PATTERN.test(sub)) throw new UnauthenticatedError('the buyer token names no valid user (sub)');
    return sub;
  }
}

/** jose's error codes, said plainly; never the token or the key. */
function reason(err: unknown): string {
  switch ((err as { code?: string }).code) {
    case 'ERR_JWT_EXPIRED':
      return 'expired';
    case 'ERR_JWT_CLAIM_VALIDATION_FAILED':
      return `claim ${(err as { claim?: string }).claim ?? ''} refused`.trim();
    case 'ERR_JOSE_ALG_NOT_ALLOWED':
      return 'algorithm not allowed';
    case 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED':
      return 'bad signature';
    default:
      return 'malformed';
  }
}
