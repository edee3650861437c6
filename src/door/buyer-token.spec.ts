// The tokens of `npm run token` are the ones the service accepts: verified by BuyerIdentityService with the
// same secret, naming the user, expiring when asked; no token without a usable secret or user.
import { BuyerIdentityService } from './buyer-identity.service';
import { BuyerTokenError, MAX_TOKEN_TTL_S, signBuyerToken } from './buyer-token';

const SECRET = 'unit-buyer-secret-0123456789abcdef';
const identity = (jwtSecret: string) =>
  new BuyerIdentityService({ jwtSecret, shopToken: 'unit-shop-token-0123' }, { token: 'unit-admin-token-0123' });
const claims = (token: string) =>
  JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString()) as { sub: string; exp: number; iat: number };

describe('signBuyerToken', () => {
  it('should make a token the service verifies with the same secret, naming the user', () => {
    expect(identity(SECRET).userOf(signBuyerToken({ jwtSecret: SECRET }, '42', 3600))).toBe('42');
    expect(identity(SECRET).userOf(signBuyerToken({ jwtSecret: SECRET }, 'alice', 60))).toBe('alice');
  });

  it('should make a token that another secret refuses', () => {
    const token = signBuyerToken({ jwtSecret: SECRET }, '42', 3600);
    expect(() => identity(`${SECRET}-other`).userOf(token)).toThrow(/bad signature/);
  });

  it('should set exp the lifetime after iat', () => {
    const { exp, iat, sub } = claims(signBuyerToken({ jwtSecret: SECRET }, '7', 900));
    expect(sub).toBe('7');
    expect(exp - iat).toBe(900);
  });

  it.each([
    ['no secret', {}, '42', 60, /BUYER_JWT_SECRET is unset/],
    ['a public key instead', { jwtPublicKey: '-----BEGIN PUBLIC KEY-----' }, '42', 60, /BUYER_JWT_PUBLIC_KEY/],
    ['a user the service refuses', { jwtSecret: SECRET }, 'al ice', 60, /user must be/],
    ['an empty user', { jwtSecret: SECRET }, '', 60, /user must be/],
    ['no lifetime', { jwtSecret: SECRET }, '42', 0, /lifetime/],
    ['a lifetime over a day', { jwtSecret: SECRET }, '42', MAX_TOKEN_TTL_S + 1, /lifetime/],
    ['a lifetime that is not a number', { jwtSecret: SECRET }, '42', NaN, /lifetime/],
  ])('should refuse %s', (_what, config, user, ttl, message) => {
    expect(() => signBuyerToken(config, user, ttl)).toThrow(BuyerTokenError);
    expect(() => signBuyerToken(config, user, ttl)).toThrow(message);
  });
});
