import { randomBytes } from 'node:crypto';
import { createSigner } from 'fast-jwt';
import { TicketNotFoundError } from '../common/domain-errors';
import { ticketIdFor } from './lottery';
import { TicketTokens } from './ticket-tokens';

const key = randomBytes(32);
const tokens = new TicketTokens(key);
/** Another process with the same key: it has not issued the token, so it verifies it. */
const other = new TicketTokens(key);
const ann = { userId: 'ann', productId: 7, ticketId: ticketIdFor(7, 'ann'), position: 12, bucket: null };

describe('ticket tokens', () => {
  it('should carry the user, product, lottery id and place through a round trip, on the issuing process and another', () => {
    const token = tokens.issue(ann);
    expect(other.verify(token, 7)).toEqual(ann);
    expect(tokens.verify(token, 7)).toEqual(ann);
  });

  it('should carry a ticket its draw has not placed yet as its bucket with no place yet', () => {
    for (const bucket of [0, 17_958_427_837]) {
      const token = tokens.issue({ ...ann, position: null, bucket });
      expect(other.verify(token, 7)).toMatchObject({ position: null, bucket });
      expect(tokens.verify(token, 7)).toMatchObject({ position: null, bucket });
    }
  });

  it("should read a token made before buckets without a place as a pre-queue ticket's (bucket 0)", () => {
    const sign = createSigner({ key, algorithm: 'HS256', noTimestamp: true });
    const before = sign({ sub: 'ann', pid: 7, pos: 0, exp: Math.floor(Date.now() / 1000) + 60 });
    expect(tokens.verify(before, 7)).toMatchObject({ position: null, bucket: 0 });
    const badBucket = sign({ sub: 'ann', pid: 7, pos: 0, bkt: -3, exp: Math.floor(Date.now() / 1000) + 60 });
    expect(() => tokens.verify(badBucket, 7)).toThrow(TicketNotFoundError);
  });

  it("should refuse another product's ticket, a forged one, and one signed with another key", () => {
    const token = tokens.issue(ann);
    expect(() => tokens.verify(token, 8)).toThrow(TicketNotFoundError);
    expect(() => other.verify(token, 8)).toThrow(TicketNotFoundError);
    const [h, , sig] = token.split('.');
    const raised = Buffer.from(JSON.stringify({ sub: 'ann', pid: 7, pos: 1, exp: 9e9 })).toString('base64url');
    expect(() => tokens.verify(`${h}.${raised}.${sig}`, 7)).toThrow(TicketNotFoundError);
    expect(() => new TicketTokens(randomBytes(32)).verify(token, 7)).toThrow(TicketNotFoundError);
    expect(() => tokens.verify('not-a-token', 7)).toThrow(TicketNotFoundError);
    expect(() => tokens.verify('x'.repeat(5000), 7)).toThrow(TicketNotFoundError);
  });

  it('should refuse an expired ticket, saying so', () => {
    const sign = createSigner({ key, algorithm: 'HS256', noTimestamp: true });
    const old = sign({ sub: 'ann', pid: 7, pos: 12, exp: Math.floor(Date.now() / 1000) - 10 });
    expect(() => tokens.verify(old, 7)).toThrow(/expired/);
  });

  it('should refuse a token whose claims are not a ticket (an admission is not a ticket)', () => {
    const sign = createSigner({ key, algorithm: 'HS256', noTimestamp: true });
    const noPos = sign({ sub: 'ann', pid: 7, exp: Math.floor(Date.now() / 1000) + 60 });
    expect(() => tokens.verify(noPos, 7)).toThrow(TicketNotFoundError);
    const badPos = sign({ sub: 'ann', pid: 7, pos: -1, exp: Math.floor(Date.now() / 1000) + 60 });
    expect(() => tokens.verify(badPos, 7)).toThrow(TicketNotFoundError);
  });

  it('should refuse a token it has verified before once it expires, and for another product', () => {
    let now = Date.UTC(2026, 0, 1, 12);
    const clock = jest.spyOn(Date, 'now').mockImplementation(() => now);
    try {
      const fresh = new TicketTokens(key);
      const token = new TicketTokens(key).issue(ann);
      expect(fresh.verify(token, 7)).toEqual(ann);
      expect(fresh.verify(token, 7)).toEqual(ann);
      expect(() => fresh.verify(token, 8)).toThrow(TicketNotFoundError);
      // A day and an hour later the token has expired: remembered or not, it is refused as expired.
      now += 25 * 3600 * 1000;
      expect(() => fresh.verify(token, 7)).toThrow(/expired/);
      // The same on the process that issued it and remembers it.
      const issuer = new TicketTokens(key);
      now -= 25 * 3600 * 1000;
      const own = issuer.issue(ann);
      expect(issuer.verify(own, 7)).toEqual(ann);
      now += 25 * 3600 * 1000;
      expect(() => issuer.verify(own, 7)).toThrow(TicketNotFoundError);
    } finally {
      clock.mockRestore();
    }
  });
});
