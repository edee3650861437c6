// A ticket's answer from what the process knows, without I/O: its status, how many are ahead, the
// estimated wait and when to poll again, and the answer itself (Reply). The caller has already read
// what the answer needs (the ticket's place, the admission view) and settles the cases that need
// PostgreSQL (whether an admitted position was spent by an order).

/** Admitted positions first..last, valid until expiresAt (epoch ms). */
export interface AdmissionBatch {
  first: number;
  last: number;
  admittedAt: number;
  expiresAt: number;
  /**
   * Live at the room's pause (made before it, not expired at it): its clock stands still while the
   * room is paused. PostgreSQL decides it, by the one rule written in waiting-room.repository.ts.
   */
  held: boolean;
}

/** What the room looks like now, as polls read it (refreshed by each process every tick). */
export interface AdmissionView {
  /** Tickets in the drawn pre-queue; null until the draw. */
  preQueue: number | null;
  /** Tickets in the pre-queue so far: counted as it fills, then its drawn size. */
  preJoined: number;
  /** Positions handed out so far: the tickets of the sealed buckets. */
  highWater: number;
  /** The last bucket sealed (-1: none yet, 0: the pre-queue). */
  sealedThrough: number;
  /** Some ticket waits in a bucket not yet sealed. */
  unsealed: boolean;
  admittedThrough: number;
  /** Admitted, not ordered, not expired: the tickets ahead of every waiting one that still may order. */
  outstanding: number;
  unitsLeft: number;
  /** Batches whose admissions have not expired, in position order. */
  live: AdmissionBatch[];
  /** Positions admitted per second, measured over the last 30 seconds of admissions. */
  ratePerS: number;
  /**
   * Since when (epoch ms) the admissions' clocks are paused, no unit being left; null while they
   * run. An admission live at the pause does not lapse during it.
   */
  pausedSince: number | null;
  /** When the view was read (epoch ms). */
  at: number;
}

export type TicketStatus = 'waiting' | 'admitted' | 'ordered' | 'sold_out' | 'ended';

/** A ticket's answer, as a join or a poll gives it. */
export interface TicketView {
  /** The signed ticket: what the buyer polls with. */
  id: string;
  /** The ticket's id in the published lottery. */
  lotteryId: string;
  productId: number;
  userId: string;
  status: TicketStatus;
  position: number | null;
  ahead: number | null;
  estimatedWaitS: number | null;
  admission?: string;
  admissionExpiresAt?: Date;
  /** Seconds until the next poll is useful (sent as Retry-After, not in the body). */
  retryAfterS: number;
}

export interface SaleWindow {
  startsAt: number | null;
  endsAt: number | null;
  admissionTtlS: number;
}

export const saleEnded = (window: SaleWindow, now: number) => window.endsAt !== null && now >= window.endsAt;

/** Where a positioned ticket stands against the admission cursor. */
export type Standing =
  | { kind: 'queued' }
  /** Admitted until expiresAt: the batch's expiry, plus the pause so far while the room is paused. */
  | { kind: 'admitted'; batch: AdmissionBatch; expiresAt: number }
  /** Admitted, and the admission is over: spent or expired, PostgreSQL says which. */
  | { kind: 'admissionOver' };

/**
 * The admission budget: the admissions outstanding (admitted, not ordered, not expired) stay below
 * ceil(ADMISSION_RATIO x units left). The one place this rule is written; the admitter, the
 * answers and their pacing ask it, and the repository is given the count it says.
 */
export class AdmissionBudget {
  constructor(readonly ratio: number) {}

  /** How many more tickets may be admitted now. */
  due(unitsLeft: number, outstanding: number): number {
    return Math.max(0, Math.ceil(this.ratio * unitsLeft) - outstanding);
  }

  /** The last position the next admission step may reach by this view: the cursor plus what is due. */
  reach(view: AdmissionView): number {
    return view.admittedThrough + this.due(view.unitsLeft, view.outstanding);
  }

  /** How many a room with `unitsLeft` admits at once with nothing outstanding: its first admission. */
  first(unitsLeft: number): number {
    return this.due(unitsLeft, 0);
  }

  /** Whether a place lies beyond what the units left could ever admit from the cursor now. */
  beyondUnitsLeft(position: number, view: AdmissionView): boolean {
    return position > view.admittedThrough + this.first(view.unitsLeft);
  }
}

export function standingOf(position: number, view: AdmissionView, now: number): Standing {
  if (position > view.admittedThrough) return { kind: 'queued' };
  const batch = findBatch(view.live, position);
  if (batch === undefined) return { kind: 'admissionOver' };
  // While paused, the time since the pause does not count for a held batch: the expiry the room
  // will give it when units come back is at least this (it adds the whole pause, longer by then).
  const paused = view.pausedSince;
  const expiresAt = paused !== null && batch.held ? batch.expiresAt + Math.max(0, now - paused) : batch.expiresAt;
  return expiresAt > now ? { kind: 'admitted', batch, expiresAt } : { kind: 'admissionOver' };
}

/** The live batch holding a position (batches are in position order and do not overlap). */
export function findBatch(live: readonly AdmissionBatch[], position: number): AdmissionBatch | undefined {
  let lo = 0;
  let hi = live.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const b = live[mid];
    if (position < b.first) hi = mid - 1;
    else if (position > b.last) lo = mid + 1;
    else return b;
  }
  return undefined;
}

export interface Waiting {
  status: 'waiting' | 'sold_out';
  ahead: number | null;
  estimatedWaitS: number | null;
}

/**
 * A ticket not yet admitted. `ahead` counts the positions before it not yet admitted plus the
 * admissions still outstanding; the wait is one tick where the next admission step reaches it,
 * else its distance to the cursor over the admission rate measured (null while nothing has been
 * admitted lately, or when sold out).
 */
export function waitingOf(
  position: number | null,
  view: AdmissionView | null,
  window: SaleWindow,
  now: number,
  /** The last position the next admission step may reach (cursor + admissions due now); its wait is one tick. */
  reach = 0,
  tickS = 1,
): Waiting {
  if (position === null || view === null) {
    const untilStart =
      window.startsAt !== null && now < window.startsAt ? Math.ceil((window.startsAt - now) / 1000) : null;
    return { status: 'waiting', ahead: null, estimatedWaitS: untilStart };
  }
  const ahead = Math.max(0, position - view.admittedThrough - 1) + view.outstanding;
  if (view.unitsLeft === 0) return { status: 'sold_out', ahead, estimatedWaitS: null };
  const estimatedWaitS =
    position <= reach ? tickS : view.ratePerS > 0 ? Math.ceil((position - view.admittedThrough) / view.ratePerS) : null;
  return { status: 'waiting', ahead, estimatedWaitS };
}

/** The latest second after the start a pre-queue ticket is first told to poll at (see firstPollWave). */
export const LAST_WAVE_S = 2;

/**
 * The second after the start at which a pre-queue ticket should first poll, from its lottery key
 * before the draw: its rank will be about `keyShare` (the key read as a fraction of the key space)
 * times the pre-queue's size, and that size only grows, so `keyShare x preJoined` (the size so far)
 * is a floor of the rank. A ticket whose floor lies within the first admission (`firstAdmission`
 * places, with a tenth to spare for the draw's spread) polls at the start, one within the second
 * admission's reach a second later, every other one LAST_WAVE_S later. At the start every pre-queue
 * ticket polls within about a second, and the service answers them behind the arrivals' joins: so
 * the buyers admitted first would be spread evenly through that wave. Paced this way, they come
 * first, and most of the others poll once the first admissions have settled what is left.
 * What it gives away: a buyer can tell from Retry-After before the start whether they are likely
 * among the first admitted. The draw, the seed's commitment and its reveal are unchanged, and the
 * ticket's key cannot be chosen (the seed is secret until after the draw).
 */
export function firstPollWave(keyShare: number, preJoined: number, firstAdmission: number): number {
  if (firstAdmission <= 0) return 0;
  return Math.min(LAST_WAVE_S, Math.floor((keyShare * preJoined) / (firstAdmission * 1.1)));
}

/** The pace of a ticket whose answer may change any second: sold out (units may come back), or behind the units left. */
export const LIVELY_S = 5;

/**
 * What else paces a waiting ticket's polls: `behindUnitsLeft` (were every unit left offered now,
 * its turn would not come), `beingDrawn` (after the start, its bucket's draw has not placed it yet:
 * a poll now waits for the draw, for half a second at least, so polling again at once is no spin).
 */
export type Pace = 'behindUnitsLeft' | 'beingDrawn' | null;

/**
 * Seconds until the next poll is useful (Retry-After). Never longer than a quarter of the admission's
 * lifetime, so an admitted buyer learns it with most of the admission left; sooner as the turn nears.
 * A waiting ticket behind the reach of the units left is most likely to end sold out, which can
 * happen any second in a flash sale: it polls at the sold-out pace, so its buyer learns the outcome
 * within seconds rather than at the end of a long wait estimated from the admission rate. Before
 * the start a ticket polls at the start, a pre-queue ticket `wave` seconds after it (one due at the
 * start first polls once more in the second before it). A ticket not yet placed after the start
 * polls at once (0: that poll waits for its bucket's draw, QueueStates.place), also after a poll
 * that waited and the draw did not come yet.
 */
export function pollAfterS(
  status: TicketStatus,
  estimatedWaitS: number | null,
  window: SaleWindow,
  now: number,
  pace: Pace = null,
  /** Before the start, a pre-queue ticket's wave (firstPollWave): seconds its first poll after the start waits. */
  wave: number | null = null,
): number {
  const longest = Math.max(1, Math.min(30, Math.floor(window.admissionTtlS / 4)));
  switch (status) {
    case 'admitted':
      return 1;
    case 'ordered':
    case 'ended':
      return 60;
    case 'sold_out':
      return Math.min(longest, LIVELY_S);
    case 'waiting': {
      if (window.startsAt !== null && now < window.startsAt) {
        const untilStart = Math.ceil((window.startsAt - now) / 1000);
        // Due at the start, a pre-queue ticket is asked back once in the second before it: its wave
        // is then reckoned with the pre-queue as it is by then, not as it was when it joined.
        const early = wave === 0 && untilStart >= 2 ? -1 : (wave ?? 0);
        return Math.max(1, Math.min(longest, untilStart + early));
      }
      if (pace === 'beingDrawn') return 0;
      if (estimatedWaitS === null) return Math.min(longest, 2);
      const paced = Math.max(1, Math.min(longest, Math.ceil(estimatedWaitS / 3)));
      return pace === 'behindUnitsLeft' ? Math.min(paced, LIVELY_S) : paced;
    }
  }
}

/**
 * One ticket's answer as it is built, by the answer it makes; every one is made by `told`, with no
 * intermediate objects (a poll is the crowd's commonest call; they were a tenth of its CPU in the
 * collector).
 */
export class Reply {
  position: number | null = null;
  now = Date.now();

  constructor(
    readonly product: SaleWindow & { id: number },
    private readonly token: string,
    readonly claims: { ticketId: string; userId: string },
    /** Counts the answer by its status. */
    private readonly count: (status: TicketStatus) => void,
  ) {}

  /** The answer, with Retry-After from its status and pace (see pollAfterS; `wave`: a pre-queue ticket's before the start). */
  told(
    status: TicketStatus,
    ahead: number | null,
    estimatedWaitS: number | null,
    pace: Pace = null,
    wave: number | null = null,
  ): TicketView {
    this.count(status);
    return {
      id: this.token,
      lotteryId: this.claims.ticketId,
      productId: this.product.id,
      userId: this.claims.userId,
      status,
      position: this.position,
      ahead,
      estimatedWaitS,
      retryAfterS: pollAfterS(status, estimatedWaitS, this.product, this.now, pace, wave),
    };
  }

  /**
   * A ticket its bucket's draw has not placed yet. Before the start, a pre-queue ticket's first
   * poll after it is timed by its lottery key's share (firstPollWave; `view` gives the pre-queue's
   * size so far); after it, the place is being drawn: poll again at once (that poll waits for the draw).
   */
  unplaced(keyShare: number | null, view: AdmissionView | null, budget: AdmissionBudget): TicketView {
    const { startsAt } = this.product;
    if (startsAt !== null && this.now < startsAt) {
      const wave =
        keyShare !== null && view ? firstPollWave(keyShare, view.preJoined, budget.first(view.unitsLeft)) : null;
      return this.told('waiting', null, Math.ceil((startsAt - this.now) / 1000), null, wave);
    }
    return this.told('waiting', null, null, 'beingDrawn');
  }

  /** A placed ticket not yet admitted: waiting, or sold out while no unit is left (`tickS`: the admission tick). */
  queued(position: number, view: AdmissionView, budget: AdmissionBudget, tickS: number): TicketView {
    const waiting = waitingOf(position, view, this.product, this.now, budget.reach(view), tickS);
    const pace: Pace = budget.beyondUnitsLeft(position, view) ? 'behindUnitsLeft' : null;
    return this.told(waiting.status, waiting.ahead, waiting.estimatedWaitS, pace);
  }
}
