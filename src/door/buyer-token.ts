// Buyer tokens made with the service's own secret, for trying the API by hand (`npm run token`):
// HS256 over BUYER_JWT_SECRET, read and checked by the same configuration code as the service's, with
// the claims the service requires (`sub` the user, `exp`). A shop with buyer identity on makes
// these in its own login; this is the same token, made from the command line.
import { createSigner } from 'fast-jwt';
import { IdentityConfig } from '../config/app-config';
import { USER_ID_PATTERN } from '../common/ids';
import { buyerKey } from './buyer-identity.service';

/** Longest a token made here lives: a day (a buyer token is short-lived by design). */
export const MAX_TOKEN_TTL_S = 86_400;

/** A refusal to make a token: the message says what to change. */
export class BuyerTokenError extends Error {}

/** A signed buyer token for `user`, valid `ttlS` seconds from now. */
export function signBuyerToken(
  config: Pick<IdentityConfig, 'jwtSecret' | 'jwtPublicKey'>,
  user: string,
  ttlS: number,
): string {
  if (config.jwtPublicKey)
    throw new BuyerTokenError(
      'BUYER_JWT_PUBLIC_KEY is set: the service verifies tokens signed with its private key, which only the issuer holds',
    );
  const key = buyerKey(config);
  if (key === null)
    throw new BuyerTokenError(
      'BUYER_JWT_SECRET is unset, so the service has buyer identity off: set it (at least 32 characters; .env.example has one) and start the service with it',
    );
  if (!USER_ID_PATTERN.test(user))
    throw new BuyerTokenError('the user must be 1 to 64 characters from A-Z a-z 0-9 _ . : -');
  if (!Number.isInteger(ttlS) || ttlS < 1 || ttlS > MAX_TOKEN_TTL_S)
    throw new BuyerTokenError(`the lifetime must be a whole number of seconds from 1 to ${MAX_TOKEN_TTL_S}`);
  const sign = createSigner({ key: key.key, algorithm: 'HS256', expiresIn: ttlS * 1000 });
  return sign({ sub: user });
}
