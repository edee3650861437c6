import { createHash, createHmac, randomBytes } from 'node:crypto';
import {
  drawnOrder,
  drawnRank,
  keyShare,
  lotteryKey,
  lotteryOrder,
  seedHashOf,
  shareOfKey,
  TICKET_ID,
  ticketIdFor,
} from './lottery';

describe('the lottery and ticket arithmetic', () => {
  it('gives one user one ticket id per product, different across products and users', () => {
    expect(ticketIdFor(7, 'ann')).toBe(ticketIdFor(7, 'ann'));
    expect(ticketIdFor(7, 'ann')).not.toBe(ticketIdFor(8, 'ann'));
    expect(ticketIdFor(7, 'ann')).not.toBe(ticketIdFor(7, 'bob'));
    expect(ticketIdFor(7, 'ann')).toMatch(TICKET_ID);
    expect(ticketIdFor(7, 'ann')).toBe(createHash('sha256').update('7:ann').digest('hex').slice(0, 24));
  });

  it('orders the pre-queue by the HMAC of each ticket id under the seed, as the published algorithm says', () => {
    const seed = randomBytes(32);
    const ids = Array.from({ length: 500 }, (_, i) => ticketIdFor(3, `user-${i}`));
    const byHand = [...ids].sort((a, b) => {
      const ka = createHmac('sha256', seed).update(a).digest('hex');
      const kb = createHmac('sha256', seed).update(b).digest('hex');
      return ka < kb ? -1 : 1;
    });
    expect(lotteryOrder(seed, ids)).toEqual(byHand);
    expect(lotteryKey(seed, ids[0])).toBe(createHmac('sha256', seed).update(ids[0]).digest('hex'));
    expect(seedHashOf(seed)).toBe(createHash('sha256').update(seed).digest('hex'));
  });

  it('draws a different order from another seed (the seed decides, not the ids)', () => {
    const ids = Array.from({ length: 200 }, (_, i) => ticketIdFor(3, `user-${i}`));
    expect(lotteryOrder(randomBytes(32), ids)).not.toEqual(lotteryOrder(randomBytes(32), ids));
  });

  it("places a bucket's ticket by its rank among the drawn order's keys, as the draw orders them", () => {
    const seed = randomBytes(32);
    const ids = Array.from({ length: 300 }, (_, i) => ticketIdFor(5, `pre-${i}`));
    const order = lotteryOrder(seed, ids);
    const keys = drawnOrder(seed, [...ids].reverse());
    expect(keys).toEqual(Buffer.concat(order.map((id) => Buffer.from(lotteryKey(seed, id).slice(0, 16), 'hex'))));
    order.forEach((id, i) => expect(drawnRank(seed, id, keys)).toBe(i + 1));
    expect(drawnRank(seed, ticketIdFor(5, 'not-drawn'), keys)).toBeNull();
  });

  it('leaves a ticket whose first 8 key bytes another shares to the full keys (null)', () => {
    const seed = randomBytes(32);
    const id = ticketIdFor(5, 'twin');
    const prefix = Buffer.from(lotteryKey(seed, id).slice(0, 16), 'hex');
    expect(drawnRank(seed, id, Buffer.concat([prefix, prefix]))).toBeNull();
    expect(drawnRank(seed, id, prefix)).toBe(1);
  });

  it("reads a key's share of the key space from its first 32 bits, alike from the key and from the seed and id", () => {
    expect(shareOfKey(Buffer.from('00000000ff', 'hex'))).toBe(0);
    expect(shareOfKey(Buffer.from('80000000', 'hex'))).toBe(0.5);
    expect(shareOfKey(Buffer.from('ffffffff', 'hex'))).toBeLessThan(1);
    const seed = randomBytes(32);
    const id = ticketIdFor(3, 'ann');
    expect(keyShare(seed, id)).toBe(shareOfKey(Buffer.from(lotteryKey(seed, id), 'hex')));
  });
});
