import { randomBytes } from 'node:crypto';
import { createSigner } from 'fast-jwt';
import { AdmissionInvalidError } from '../common/domain-errors';
import { AdmissionTokens } from './admission-tokens';

describe('admission tokens', () => {
  const key = randomBytes(32);
  const tokens = new AdmissionTokens(key);
  const later = Date.now() + 60_000;
  const good = tokens.issue({ userId: 'ann', productId: 4, ticketId: 'ab'.repeat(12), position: 17, expiresAt: later });

  const refusal = (token: unknown, userId = 'ann', productId = 4) => {
    try {
      tokens.verify(token, userId, productId);
    } catch (err) {
      expect(err).toBeInstanceOf(AdmissionInvalidError);
      return (err as Error).message;
    }
    throw new Error('the token was accepted');
  };

  it('gives back the position of a token it issued, for its user and product', () => {
    expect(tokens.verify(good, 'ann', 4)).toEqual({
      userId: 'ann',
      productId: 4,
      ticketId: 'ab'.repeat(12),
      position: 17,
      expiresAt: Math.floor(later / 1000) * 1000,
    });
  });

  it("refuses another user's, another product's, an expired, a forged and a malformed token, saying which", () => {
    expect(refusal(good, 'bob')).toMatch(/another user/);
    expect(refusal(good, 'ann', 5)).toMatch(/another product/);
    const expired = tokens.issue({
      userId: 'ann',
      productId: 4,
      ticketId: 'x',
      position: 1,
      expiresAt: Date.now() - 5000,
    });
    expect(refusal(expired)).toMatch(/expired/);
    const forged = createSigner({ key: randomBytes(32), algorithm: 'HS256' })({ sub: 'ann', pid: 4, pos: 1, exp: 9e9 });
    expect(refusal(forged)).toMatch(/forged/);
    expect(refusal('not.a.token')).toMatch(/forged or malformed/);
    expect(refusal(42)).toMatch(/malformed/);
    expect(refusal('x'.repeat(3000))).toMatch(/malformed/);
  });

  it('refuses a token of the same key whose position is not a positive integer', () => {
    const sign = createSigner({ key, algorithm: 'HS256' });
    expect(refusal(sign({ sub: 'ann', pid: 4, pos: 0, exp: 9e9 }))).toMatch(/forged/);
    expect(refusal(sign({ sub: 'ann', pid: 4, pos: '3', exp: 9e9 }))).toMatch(/forged/);
  });
});
