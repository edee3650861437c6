// Admission tokens: a JWT (HS256, fast-jwt) naming the user, the product, the ticket and its queue
// position, expiring with the admission. The order path trusts nothing else: the signature proves
// the service admitted that position, `sub` and `pid` bind it to one user and one product, `exp`
// ends it, and PostgreSQL's unique index on (product_id, admission_position) spends it once.
import { createSigner, createVerifier, TokenError } from 'fast-jwt';
import { AdmissionInvalidError } from '../common/domain-errors';

/** Admissions are refused this many characters early: a real one is a few hundred. */
const MAX_ADMISSION_LENGTH = 2048;

export interface Admission {
  userId: string;
  productId: number;
  ticketId: string;
  position: number;
  /** Epoch ms. */
  expiresAt: number;
}

interface Claims {
  sub?: unknown;
  pid?: unknown;
  tid?: unknown;
  pos?: unknown;
  exp?: unknown;
}

export class AdmissionTokens {
  private readonly signer: (payload: Record<string, unknown>) => string;
  private readonly verifier: (token: string) => Claims;

  constructor(key: Buffer) {
    this.signer = createSigner({ key, algorithm: 'HS256', noTimestamp: true });
    // No clock tolerance: the admission ends when the queue says, on this service's clock.
    this.verifier = createVerifier({ key, algorithms: ['HS256'], requiredClaims: ['sub', 'pid', 'pos', 'exp'] });
  }

  issue(a: Admission): string {
    return this.signer({
      sub: a.userId,
      pid: a.productId,
      tid: a.ticketId,
      pos: a.position,
      exp: Math.floor(a.expiresAt / 1000),
    });
  }

  /** The admission a token carries for this user and product; AdmissionInvalidError otherwise (never says more than why). */
  verify(token: unknown, userId: string, productId: number): Admission {
    if (typeof token !== 'string' || token.length === 0 || token.length > MAX_ADMISSION_LENGTH)
      throw new AdmissionInvalidError('malformed');
    let claims: Claims;
    try {
      claims = this.verifier(token);
    } catch (err) {
      throw new AdmissionInvalidError(
        err instanceof TokenError && err.code === TokenError.codes.expired ? 'expired' : 'forged or malformed',
      );
    }
    if (claims.pid !== productId) throw new AdmissionInvalidError('it is for another product');
    if (claims.sub !== userId) throw new AdmissionInvalidError("it is another user's");
    if (typeof claims.pos !== 'number' || !Number.isSafeInteger(claims.pos) || claims.pos < 1)
      throw new AdmissionInvalidError('forged or malformed');
    return {
      userId,
      productId,
      ticketId: typeof claims.tid === 'string' ? claims.tid : '',
      position: claims.pos,
      expiresAt: Number(claims.exp) * 1000,
    };
  }
}
