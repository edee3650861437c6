import {
  AdmissionBudget,
  findBatch,
  firstPollWave,
  LAST_WAVE_S,
  LIVELY_S,
  pollAfterS,
  Reply,
  SaleWindow,
  standingOf,
  waitingOf,
} from './ticket-status';
import { AdmissionView } from './waiting-room.repository';

const now = 1_000_000;
const view = (over: Partial<AdmissionView> = {}): AdmissionView => ({
  preQueue: 0,
  preJoined: 0,
  highWater: 40,
  sealedThrough: 5,
  unsealed: false,
  admittedThrough: 10,
  outstanding: 3,
  unitsLeft: 5,
  live: [
    { first: 1, last: 4, admittedAt: now - 90_000, expiresAt: now + 30_000, held: false },
    { first: 5, last: 10, admittedAt: now - 1000, expiresAt: now + 119_000, held: false },
  ],
  ratePerS: 2,
  pausedSince: null,
  at: now,
  ...over,
});
const window: SaleWindow = { startsAt: null, endsAt: null, admissionTtlS: 120 };

describe('a ticket against the admission cursor', () => {
  it('is queued past the cursor, admitted inside a live batch, and over when its batch has expired or is gone', () => {
    expect(standingOf(11, view(), now)).toEqual({ kind: 'queued' });
    expect(standingOf(7, view(), now)).toMatchObject({ kind: 'admitted', batch: { first: 5, last: 10 } });
    expect(standingOf(2, view(), now + 31_000)).toEqual({ kind: 'admissionOver' });
    expect(standingOf(3, view({ live: [view().live[1]] }), now)).toEqual({ kind: 'admissionOver' });
  });

  it('stays admitted while the room holds its batch through a pause, the pause not counting against the admission', () => {
    const held = (v: AdmissionView) => ({ ...v, live: [{ ...v.live[0], held: true }, v.live[1]] });
    // Paused 40 s ago with 30 s left on batch 1..4: 30 s left still, its expiry 40 s later.
    const paused = held(view({ pausedSince: now - 40_000 }));
    expect(standingOf(2, paused, now)).toEqual({
      kind: 'admitted',
      batch: paused.live[0],
      expiresAt: now + 30_000 + 40_000,
    });
    // Paused 50 s ago: batch 1..4 is held; batch 5..10 (which PostgreSQL did not hold: made after
    // the pause began, when units came back before the clock resumed) keeps its own expiry.
    const since = held(view({ pausedSince: now - 50_000 }));
    expect(standingOf(2, since, now + 31_000)).toMatchObject({ kind: 'admitted', expiresAt: now + 30_000 + 81_000 });
    expect(standingOf(7, since, now)).toMatchObject({ kind: 'admitted', expiresAt: now + 119_000 });
    // A batch not held (it had expired before the pause) stays over.
    const lapsedBefore = view({ pausedSince: now + 31_000 });
    expect(standingOf(2, lapsedBefore, now + 60_000)).toEqual({ kind: 'admissionOver' });
  });

  it('finds the batch of a position by bisection over many batches', () => {
    const live = Array.from({ length: 1000 }, (_, i) => ({
      first: i * 3 + 1,
      last: i * 3 + 3,
      admittedAt: 0,
      expiresAt: 1,
      held: false,
    }));
    for (const p of [1, 2, 3, 4, 1500, 2999, 3000]) expect(findBatch(live, p)).toBe(live[Math.floor((p - 1) / 3)]);
    expect(findBatch(live, 3001)).toBeUndefined();
  });

  it('counts ahead the positions not yet admitted before it plus the admissions outstanding, and waits by the measured rate', () => {
    expect(waitingOf(15, view(), window, now)).toEqual({ status: 'waiting', ahead: 4 + 3, estimatedWaitS: 3 });
    expect(waitingOf(11, view({ ratePerS: 0 }), window, now)).toEqual({
      status: 'waiting',
      ahead: 3,
      estimatedWaitS: null,
    });
  });

  it('is sold out while no unit is left, and waiting again in its place when units come back', () => {
    expect(waitingOf(15, view({ unitsLeft: 0 }), window, now)).toEqual({
      status: 'sold_out',
      ahead: 7,
      estimatedWaitS: null,
    });
    expect(waitingOf(15, view({ unitsLeft: 1 }), window, now).status).toBe('waiting');
  });

  it('should estimate one tick for a position the next admission step reaches, before any rate is known', () => {
    expect(waitingOf(12, view({ ratePerS: 0 }), window, now, 12, 1).estimatedWaitS).toBe(1);
    expect(waitingOf(13, view({ ratePerS: 0 }), window, now, 12, 1).estimatedWaitS).toBeNull();
    expect(waitingOf(13, view(), window, now, 12, 1).estimatedWaitS).toBe(2);
  });

  it('before the draw has no position and waits for the start', () => {
    expect(waitingOf(null, null, { ...window, startsAt: now + 9500 }, now)).toEqual({
      status: 'waiting',
      ahead: null,
      estimatedWaitS: 10,
    });
  });
});

describe('Retry-After of a ticket', () => {
  it('paces a waiting ticket by a third of its wait, never past a quarter of the admission lifetime nor 30 s', () => {
    expect(pollAfterS('waiting', 30, window, now)).toBe(10);
    expect(pollAfterS('waiting', 600, window, now)).toBe(30);
    expect(pollAfterS('waiting', 600, { ...window, admissionTtlS: 20 }, now)).toBe(5);
    expect(pollAfterS('waiting', 1, window, now)).toBe(1);
    expect(pollAfterS('waiting', null, window, now)).toBe(2);
  });

  it('paces a waiting ticket behind the reach of the units left as a sold-out one, never slower than its own pace', () => {
    expect(pollAfterS('waiting', 600, window, now, 'behindUnitsLeft')).toBe(5);
    expect(pollAfterS('waiting', 6, window, now, 'behindUnitsLeft')).toBe(2);
    expect(pollAfterS('waiting', 600, { ...window, admissionTtlS: 8 }, now, 'behindUnitsLeft')).toBe(2);
    expect(pollAfterS('waiting', null, { ...window, startsAt: now + 400_000 }, now, 'behindUnitsLeft')).toBe(30);
  });

  it('asks an admitted buyer back at once, a finished one rarely, and a pre-queue ticket at the start', () => {
    expect(pollAfterS('admitted', 0, window, now)).toBe(1);
    expect(pollAfterS('ordered', 0, window, now)).toBe(60);
    expect(pollAfterS('ended', null, window, now)).toBe(60);
    expect(pollAfterS('sold_out', null, window, now)).toBe(5);
    expect(pollAfterS('waiting', null, { ...window, startsAt: now + 4200 }, now)).toBe(5);
    expect(pollAfterS('waiting', null, { ...window, startsAt: now + 400_000 }, now)).toBe(30);
  });

  it('asks a ticket its draw has yet to place back at once (that poll waits for the draw)', () => {
    expect(pollAfterS('waiting', null, window, now, 'beingDrawn')).toBe(0);
    expect(pollAfterS('waiting', null, { ...window, startsAt: now - 10 }, now, 'beingDrawn')).toBe(0);
    expect(pollAfterS('waiting', null, { ...window, startsAt: now + 4200 }, now, 'beingDrawn')).toBe(5);
    expect(pollAfterS('waiting', null, { ...window, startsAt: now - 10 }, now)).toBe(2);
  });
});

describe("a pre-queue ticket's first poll after the start", () => {
  it('is at the start for a key whose rank floor lies within the first admission, with a tenth to spare', () => {
    // 20,000 in the pre-queue so far, 1,500 admitted first: rank floor = share x 20,000.
    expect(firstPollWave(0, 20_000, 1500)).toBe(0);
    expect(firstPollWave(1500 / 20_000, 20_000, 1500)).toBe(0);
    expect(firstPollWave((1.1 * 1500 - 1) / 20_000, 20_000, 1500)).toBe(0);
    expect(firstPollWave((1.1 * 1500 + 1) / 20_000, 20_000, 1500)).toBe(1);
  });

  it('is a second later within the second admission, and at most LAST_WAVE_S later for the rest', () => {
    expect(firstPollWave(2000 / 20_000, 20_000, 1500)).toBe(1);
    expect(firstPollWave(3400 / 20_000, 20_000, 1500)).toBe(LAST_WAVE_S);
    expect(firstPollWave(0.999, 20_000, 1500)).toBe(LAST_WAVE_S);
  });

  it('is at the start for every ticket while the pre-queue is smaller than the first admission, or nothing is on sale', () => {
    expect(firstPollWave(0.999, 1000, 1500)).toBe(0);
    expect(firstPollWave(0.999, 20_000, 0)).toBe(0);
  });

  it("adds the wave to a pre-queue ticket's Retry-After before the start, within the longest pace", () => {
    expect(pollAfterS('waiting', null, { ...window, startsAt: now + 4200 }, now, null, 2)).toBe(7);
    expect(pollAfterS('waiting', null, { ...window, startsAt: now + 4200 }, now, null, 1)).toBe(6);
    expect(pollAfterS('waiting', null, { ...window, startsAt: now + 400_000 }, now, null, 2)).toBe(30);
    expect(pollAfterS('waiting', null, { ...window, startsAt: now + 4200, admissionTtlS: 24 }, now, null, 2)).toBe(6);
  });

  it('asks a pre-queue ticket due at the start back once in the second before it, to reckon its wave again', () => {
    // 4.2 s to go: back at 4 s (0.2 s before the start); from there, at the start.
    expect(pollAfterS('waiting', null, { ...window, startsAt: now + 4200 }, now, null, 0)).toBe(4);
    expect(pollAfterS('waiting', null, { ...window, startsAt: now + 200 }, now, null, 0)).toBe(1);
    expect(pollAfterS('waiting', null, { ...window, startsAt: now + 1200 }, now, null, 0)).toBe(1);
    expect(pollAfterS('waiting', null, { ...window, startsAt: now + 400_000 }, now, null, 0)).toBe(30);
    // A ticket that is not in the pre-queue (no wave) polls at the start, as before.
    expect(pollAfterS('waiting', null, { ...window, startsAt: now + 4200 }, now)).toBe(5);
    // After the start the wave plays no part: the draw places the ticket at the next tick.
    expect(pollAfterS('waiting', null, { ...window, startsAt: now - 10 }, now, 'beingDrawn', 2)).toBe(0);
  });
});

describe('the admission budget', () => {
  const budget = new AdmissionBudget(1.5);

  it('should admit while the outstanding admissions stay below ceil(ratio x units left)', () => {
    expect(budget.due(10, 0)).toBe(15);
    expect(budget.due(3, 4)).toBe(1); // ceil(4.5) = 5
    expect(budget.due(3, 5)).toBe(0);
  });

  it('should admit nobody when sold out, and never a negative count', () => {
    expect(budget.due(0, 0)).toBe(0);
    expect(new AdmissionBudget(1).due(2, 9)).toBe(0);
  });

  it("should say how far the next step reaches, the first admission's size, and which places lie beyond the units left", () => {
    // Cursor 10, 5 units left, 3 outstanding: ceil(7.5) - 3 = 5 more, through place 15.
    expect(budget.reach(view())).toBe(15);
    expect(budget.first(5)).toBe(8);
    expect(budget.beyondUnitsLeft(18, view())).toBe(false);
    expect(budget.beyondUnitsLeft(19, view())).toBe(true);
  });
});

describe('the answer a ticket is told (Reply)', () => {
  const product = { id: 7, ...window };
  const answer = (over: Partial<SaleWindow> = {}, position: number | null = null) => {
    const counted: string[] = [];
    const reply = new Reply({ ...product, ...over }, 'token', { ticketId: 'lot-1', userId: 'ann' }, (s) =>
      counted.push(s),
    );
    reply.now = now;
    reply.position = position;
    return { reply, counted };
  };
  const budget = new AdmissionBudget(1);

  it('names the ticket, its place and Retry-After, and counts the answer by its status', () => {
    const { reply, counted } = answer({}, 12);
    expect(reply.told('sold_out', 3, null)).toEqual({
      id: 'token',
      lotteryId: 'lot-1',
      productId: 7,
      userId: 'ann',
      status: 'sold_out',
      position: 12,
      ahead: 3,
      estimatedWaitS: null,
      retryAfterS: pollAfterS('sold_out', null, window, now),
    });
    expect(counted).toEqual(['sold_out']);
  });

  it("tells an unplaced pre-queue ticket to poll at the start plus its key's wave, and one unplaced after the start at once", () => {
    const startsAt = now + 10_000;
    const before = answer({ startsAt }).reply.unplaced(0.9, view({ preJoined: 100, unitsLeft: 5 }), budget);
    const wave = firstPollWave(0.9, 100, budget.first(5));
    expect(wave).toBe(LAST_WAVE_S);
    expect(before).toMatchObject({ status: 'waiting', position: null, estimatedWaitS: 10 });
    expect(before.retryAfterS).toBe(pollAfterS('waiting', 10, { ...window, startsAt }, now, null, wave));
    const after = answer({ startsAt: now - 1000 }).reply.unplaced(0.9, view(), budget);
    expect(after).toMatchObject({ status: 'waiting', position: null, estimatedWaitS: null, retryAfterS: 0 });
  });

  it('tells a placed ticket not yet admitted how many are ahead and its wait, paced as one behind the units left', () => {
    const slow = view({ ratePerS: 0.1 });
    const far = answer({}, 40).reply.queued(40, slow, budget, 1);
    const waiting = waitingOf(40, slow, window, now, budget.reach(slow), 1);
    expect(far).toMatchObject({ status: 'waiting', ahead: waiting.ahead, estimatedWaitS: waiting.estimatedWaitS });
    // Its own pace would be a third of a 300 s wait; behind the units left it polls as a sold-out one.
    expect(pollAfterS('waiting', waiting.estimatedWaitS, window, now)).toBe(30);
    expect(far.retryAfterS).toBe(LIVELY_S);
    expect(answer({}, 40).reply.queued(40, view({ unitsLeft: 0 }), budget, 1)).toMatchObject({
      status: 'sold_out',
      estimatedWaitS: null,
    });
  });
});
