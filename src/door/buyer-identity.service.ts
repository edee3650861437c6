// Buyer identity: with BUYER_JWT_SECRET (HS256) or BUYER_JWT_PUBLIC_KEY (RS256 or ES256) set, a
// buyer call carries a JWT whose `sub` is the user. The algorithm is fixed by the key that is
// configured, never taken from the token (so `alg: none`, or an HS256 token signed with the public
// key as its secret, are refused like any bad signature).
//
// A bearer that is not a buyer token but the service's admin or shop token (a newcomer's first
// mistake) is told so by name, never by value; those two are compared only once verification has
// failed, in constant time, so a buyer's valid token costs nothing more.
//
// Verified with fast-jwt (nearform's, the verifier of @fastify/jwt) rather than jose: jose verifies
// through WebCrypto, 147 µs per HS256 token on this machine against fast-jwt's 18 µs on Node's
// own crypto (20,000 tokens each, one run), and a flash sale verifies one token per order.
import { createPublicKey } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import { createVerifier, TokenError } from 'fast-jwt';
import { AdminConfig, IdentityConfig, ResolvedAdminConfig, ResolvedIdentityConfig } from '../config/app-config';
import { SharedSecret } from '../common/bearer';
import { UnauthenticatedError } from '../common/domain-errors';
import { USER_ID_PATTERN } from '../common/ids';

/** Longer tokens are refused before any parsing (a buyer token is a few hundred bytes). */
export const MAX_TOKEN_LENGTH = 4096;
/** Clock skew allowed between the token's issuer and this service, for exp and nbf. */
export const CLOCK_TOLERANCE_S = 5;

/** The verification key and its one algorithm, from the configuration; null when identity is off. */
export function buyerKey(
  config: Pick<IdentityConfig, 'jwtSecret' | 'jwtPublicKey'>,
): { key: string | Buffer; algorithm: string } | null {
  // A Buffer: given a string, fast-jwt encodes the secret again for every token.
  if (config.jwtSecret) return { key: Buffer.from(config.jwtSecret, 'utf8'), algorithm: 'HS256' };
  if (!config.jwtPublicKey) return null;
  // A PEM given in one line with literal \n (as many secret stores hold it) is read as lines.
  const pem = config.jwtPublicKey.replace(/\\n/g, '\n');
  const key = createPublicKey(pem);
  if (key.asymmetricKeyType === 'rsa') return { key: pem, algorithm: 'RS256' };
  if (key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1')
    return { key: pem, algorithm: 'ES256' };
  throw new Error('BUYER_JWT_PUBLIC_KEY must be an RSA key (RS256) or an EC P-256 key (ES256)');
}

@Injectable()
export class BuyerIdentityService {
  private readonly verify: ((token: string) => { sub?: unknown }) | null;
  /** The service's other tokens, by the name the message gives them. */
  private readonly otherTokens: Array<{ name: string; secret: SharedSecret }>;

  constructor(@Inject(IdentityConfig) config: ResolvedIdentityConfig, @Inject(AdminConfig) admin: ResolvedAdminConfig) {
    this.otherTokens = [
      { name: 'the admin token (ADMIN_TOKEN)', secret: new SharedSecret(admin.token) },
      { name: "the shop's token (SHOP_TOKEN)", secret: new SharedSecret(config.shopToken) },
    ];
    const k = buyerKey(config);
    this.verify =
      k === null
        ? null
        : createVerifier({
            key: k.key,
            algorithms: [k.algorithm as 'HS256'],
            requiredClaims: ['sub', 'exp'],
            clockTolerance: CLOCK_TOLERANCE_S * 1000,
            // No cache of verified tokens: in a sale most buyers call once, and fast-jwt's cache
            // hashes every token to look it up (a profile of the HS256 orders showed that hash at
            // 1.6% of the service's CPU, the verification itself at 2-4%).
            cache: false,
          });
  }

  /** Whether buyer calls need a verified token (else POST /orders trusts its body's userId). */
  get enabled(): boolean {
    return this.verify !== null;
  }

  /** The user a buyer token names; UnauthenticatedError for anything else. */
  userOf(token: string | null): string {
    if (this.verify === null) throw new UnauthenticatedError('buyer tokens are not configured');
    if (token === null) throw new UnauthenticatedError('a buyer bearer token is required');
    if (token.length > MAX_TOKEN_LENGTH)
      throw new UnauthenticatedError(`the bearer token is longer than ${MAX_TOKEN_LENGTH} characters`);
    let sub: unknown;
    try {
      sub = this.verify(token).sub;
    } catch (err) {
      const other = this.otherTokenNamed(token);
      if (other !== null)
        throw new UnauthenticatedError(
          `the bearer token is ${other}, not a buyer token: this call takes a buyer's JWT`,
        );
      throw new UnauthenticatedError(`the buyer token is not valid: ${reason(err)}`);
    }
    if (typeof sub !== 'string' || !USER_ID_PATTERN.test(sub))
      throw new UnauthenticatedError('the buyer token names no valid user (sub)');
    return sub;
  }

  /** Which of the service's other tokens this is, or null; every one compared, so the time tells nothing. */
  private otherTokenNamed(token: string): string | null {
    const matches = this.otherTokens.map((t) => t.secret.matches(token));
    const at = matches.indexOf(true);
    return at === -1 ? null : this.otherTokens[at].name;
  }
}

/** fast-jwt's error codes, said plainly; never the token or the key. */
function reason(err: unknown): string {
  if (!(err instanceof TokenError)) return 'malformed';
  switch (err.code) {
    case TokenError.codes.expired:
      return 'expired';
    case TokenError.codes.inactive:
      return 'not valid yet (nbf)';
    case TokenError.codes.missingRequiredClaim:
      return err.message.includes(' sub ') ? 'no sub claim' : 'no exp claim';
    case TokenError.codes.invalidAlgorithm:
      return 'algorithm not allowed';
    case TokenError.codes.invalidSignature:
    case TokenError.codes.missingSignature:
      return 'bad signature';
    default:
      return 'malformed';
  }
}
