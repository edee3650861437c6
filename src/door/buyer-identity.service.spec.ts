// Buyer tokens are verified with the one algorithm of the configured key: every hostile token is
// an UnauthenticatedError, and only a well-signed, current token with a valid sub names a user.
import { generateKeyPairSync } from 'node:crypto';
import { SignJWT, UnsecuredJWT } from 'jose';
import { UnauthenticatedError } from '../common/domain-errors';
import { BuyerIdentityService, buyerKey, MAX_TOKEN_LENGTH } from './buyer-identity.service';

const SECRET = 'unit-buyer-secret-0123456789abcdef';
const now = () => Math.floor(Date.now() / 1000);
const hs256 = (claims: Record<string, unknown>, secret = SECRET) =>
  new SignJWT(claims).setProtectedHeader({ alg: 'HS256' }).sign(new TextEncoder().encode(secret));
const ADMIN_TOKEN = 'unit-admin-token-0123';
const SHOP_TOKEN = 'unit-shop-token-0123';
const identity = (jwtSecret?: string, jwtPublicKey?: string) =>
  new BuyerIdentityService({ jwtSecret, jwtPublicKey, shopToken: SHOP_TOKEN }, { token: ADMIN_TOKEN });

function refusal(id: BuyerIdentityService, token: string | null): string {
  try {
    id.userOf(token);
  } catch (err) {
    expect(err).toBeInstanceOf(UnauthenticatedError);
    return (err as Error).message;
  }
  throw new Error('the token was accepted');
}

describe('BuyerIdentityService', () => {
  it('should name the user of a valid HS256 token, signed by another implementation (jose)', async () => {
    expect(identity(SECRET).userOf(await hs256({ sub: 'buyer-1', exp: now() + 60 }))).toBe('buyer-1');
  });

  it('should be off without a secret or a public key, and refuse any token then', async () => {
    const off = identity();
    expect(off.enabled).toBe(false);
    refusal(off, await hs256({ sub: 'buyer-1', exp: now() + 60 }));
  });

  it.each([
    ['no token', async () => null, 'required'],
    ['a malformed token', async () => 'not.a.jwt', 'malformed'],
    ['a token that is not even dotted', async () => 'garbage', 'malformed'],
    ['an unsigned token (alg none)', async () => new UnsecuredJWT({ sub: 'buyer-1', exp: now() + 60 }).encode(), ''],
    [
      'a token signed with another secret',
      async () => hs256({ sub: 'buyer-1', exp: now() + 60 }, 'another-secret-0123456789abcdefgh'),
      'bad signature',
    ],
    ['an expired token', async () => hs256({ sub: 'buyer-1', exp: now() - 60 }), 'expired'],
    ['a token not yet valid', async () => hs256({ sub: 'buyer-1', exp: now() + 120, nbf: now() + 60 }), 'nbf'],
    ['a token without exp', async () => hs256({ sub: 'buyer-1' }), 'no exp claim'],
    ['a token without sub', async () => hs256({ exp: now() + 60 }), 'no sub claim'],
    ['a token whose sub is no valid userId', async () => hs256({ sub: 'a b', exp: now() + 60 }), 'sub'],
    [
      'a token with a tampered payload',
      async () => {
        const [h, , s] = (await hs256({ sub: 'buyer-1', exp: now() + 60 })).split('.');
        const forged = Buffer.from(JSON.stringify({ sub: 'buyer-2', exp: now() + 60 })).toString('base64url');
        return `${h}.${forged}.${s}`;
      },
      'bad signature',
    ],
    ['a huge token', async () => 'a'.repeat(MAX_TOKEN_LENGTH + 1), 'longer'],
  ])('should refuse %s', async (_name, make, why) => {
    expect(refusal(identity(SECRET), await make())).toContain(why);
  });

  it('should say that the admin token or the shop token is the wrong kind of token, by name, never by value', () => {
    const admin = refusal(identity(SECRET), ADMIN_TOKEN);
    expect(admin).toBe(
      "the bearer token is the admin token (ADMIN_TOKEN), not a buyer token: this call takes a buyer's JWT",
    );
    expect(refusal(identity(SECRET), SHOP_TOKEN)).toBe(
      "the bearer token is the shop's token (SHOP_TOKEN), not a buyer token: this call takes a buyer's JWT",
    );
    // Only the exact token: one character off is any malformed token.
    expect(refusal(identity(SECRET), `${ADMIN_TOKEN}x`)).toBe('the buyer token is not valid: malformed');
    expect(admin).not.toContain(ADMIN_TOKEN);
  });

  describe('with a public key', () => {
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const publicPem = rsa.publicKey.export({ type: 'spki', format: 'pem' }).toString();

    it('should name the user of a valid RS256 token', async () => {
      const token = await new SignJWT({ sub: 'buyer-9', exp: now() + 60 })
        .setProtectedHeader({ alg: 'RS256' })
        .sign(rsa.privateKey);
      expect(identity(undefined, publicPem).userOf(token)).toBe('buyer-9');
    });

    it('should refuse an HS256 token signed with the public key as its secret', async () => {
      const token = await hs256({ sub: 'buyer-9', exp: now() + 60 }, publicPem);
      expect(refusal(identity(undefined, publicPem), token)).toContain('algorithm not allowed');
    });

    it('should read a PEM given on one line with literal \\n', () => {
      expect(buyerKey({ jwtPublicKey: publicPem.replace(/\n/g, '\\n') })?.algorithm).toBe('RS256');
    });

    it('should take ES256 for a P-256 key and refuse other curves', () => {
      const p256 = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
        .publicKey.export({ type: 'spki', format: 'pem' })
        .toString();
      const p384 = generateKeyPairSync('ec', { namedCurve: 'secp384r1' })
        .publicKey.export({ type: 'spki', format: 'pem' })
        .toString();
      expect(buyerKey({ jwtPublicKey: p256 })?.algorithm).toBe('ES256');
      expect(() => buyerKey({ jwtPublicKey: p384 })).toThrow('EC P-256');
    });
  });
});
