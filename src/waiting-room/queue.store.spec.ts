import { arrivalPosition, positionsTaken, QueueControl, stillValid, TicketRecord } from './queue.store';

const control = (over: Partial<QueueControl> = {}): QueueControl => ({
  epoch: 3,
  base: 100,
  pre: 0,
  drawn: true,
  shards: 4,
  arrivals: 7,
  ...over,
});
const ticket = (e: number, k: 'p' | 'a', position: number | null) => ({
  record: { e, k, at: 0, u: 'u' } as TicketRecord,
  position,
});

describe('where a queue epoch puts positions, and which tickets keep theirs', () => {
  it('counts arrivals after the base and the pre-queue drawn in the epoch, once drawn', () => {
    expect(arrivalPosition(control({ pre: 20 }), 5)).toBe(125);
    expect(arrivalPosition(control({ drawn: false }), 5)).toBeNull();
    expect(positionsTaken(control({ pre: 20 }))).toBe(127);
  });

  it("keeps every ticket of the current epoch, and an older epoch's only below where the new positions begin", () => {
    expect(stillValid(ticket(3, 'a', 500), control())).toBe(true);
    expect(stillValid(ticket(2, 'a', 100), control())).toBe(true);
    expect(stillValid(ticket(2, 'a', 101), control())).toBe(false);
    expect(stillValid(ticket(2, 'a', null), control())).toBe(false);
    // This epoch drew the pre-queue: its positions (base + 1 .. base + pre) stand.
    expect(stillValid(ticket(2, 'p', 120), control({ pre: 20 }))).toBe(true);
    expect(stillValid(ticket(2, 'p', 121), control({ pre: 20 }))).toBe(false);
  });

  it('keeps a pre-queue ticket of an older epoch without a position only while its draw is still to come', () => {
    expect(stillValid(ticket(2, 'p', null), control({ drawn: false }))).toBe(true);
    expect(stillValid(ticket(2, 'p', null), control({ drawn: true }))).toBe(false);
  });
});
