// What this process knows of each waiting room, so that a join and a poll need no extra round
// trip: the room's row (its seed), the admission view (cursor, outstanding admissions, units left,
// measured rate, positions handed out), kept fresh by the Admitter's ticks and by polls, and after the draw
// the drawn pre-queue's lottery keys, which place any pre-queue ticket without a statement.
import { Injectable } from '@nestjs/common';
import { UnavailableError } from '../common/domain-errors';
import { DoorConfig, HttpConfig, WaitingRoomConfig } from '../config/app-config';
import { drawnRank, keyShare } from './lottery';
import { AdmissionView, RoomRow, WaitingRoomRepository } from './waiting-room.repository';

/** The drawn pre-queue of one room: 8-byte key prefixes in draw order. */
interface Drawn {
  keys: Buffer;
  count: number;
}

/**
 * How long, in admission ticks, a poll of a pre-queue ticket made after the start may wait for the
 * draw and the first admission (see firstAdmission), and at most DRAW_WAIT_MAX_MS (a long
 * ADMISSION_TICK_MS must not hold a poll for long); then it is answered as before the draw.
 */
export const DRAW_WAIT_TICKS = 3;
export const DRAW_WAIT_MAX_MS = 3000;

/** Whether a view shows the draw and, where anyone can be admitted, the first admission. */
function drawSettled(view: AdmissionView): boolean {
  return view.preQueue !== null && (view.admittedThrough > 0 || view.preQueue === 0 || view.unitsLeft === 0);
}

/** A pre-queue ticket's place (null before the draw), or before the draw its key's share (see keyShare). */
export interface PreQueuePlace {
  position: number | null;
  keyShare: number | null;
  view: AdmissionView | null;
}

@Injectable()
export class QueueStates {
  private readonly rooms = new Map<number, RoomRow>();
  private readonly views = new Map<number, AdmissionView>();
  /** productId -> when this process last made a ticket of it (the admitter asks). */
  private readonly joined = new Map<number, number>();
  private readonly drawn = new Map<number, Drawn>();
  private readonly refreshing = new Map<number, Promise<AdmissionView | null>>();
  private readonly loadingDraw = new Map<number, Promise<Drawn>>();
  private readonly awaitingDraw = new Map<number, Promise<AdmissionView | null>>();
  /** How old an admission view may be when a poll reads it. */
  private readonly freshForMs: number;
  private readonly tickMs: number;

  constructor(
    private readonly repo: WaitingRoomRepository,
    config: WaitingRoomConfig,
    private readonly http: HttpConfig,
    door: DoorConfig,
  ) {
    // A waiting ticket must learn that units came back as soon as a refusal from memory would (I8).
    this.freshForMs = Math.min(config.admissionTickMs, door.soldOutStaleMs);
    this.tickMs = config.admissionTickMs;
  }

  /** The room's row as first read (the seed never changes); null when the product has no room. */
  async room(productId: number): Promise<RoomRow | null> {
    return this.rooms.get(productId) ?? this.refreshRoom(productId);
  }

  async refreshRoom(productId: number): Promise<RoomRow | null> {
    const room = await this.repo.room(productId).catch(this.unavailable);
    if (room) this.rooms.set(productId, room);
    else this.rooms.delete(productId);
    return room;
  }

  /**
   * The admission view, read again when older than the tick or SOLD_OUT_STALE_MS, whichever is
   * shorter (the admitter's ticks read it in busy rooms; a poll refreshes it in between).
   */
  async view(productId: number): Promise<AdmissionView | null> {
    return this.freshView(productId) ?? this.refreshView(productId);
  }

  /** The admission view when this process holds a fresh one, else undefined (then `view` reads it). */
  freshView(productId: number): AdmissionView | undefined {
    const known = this.views.get(productId);
    return known && Date.now() - known.at < this.freshForMs ? known : undefined;
  }

  /**
   * A ticket was made here just now. The admitter reads the room at its next tick rather than a
   * second later: an arrival may be admitted at once where the budget has room, and before the
   * start the pre-queue's size paces the first polls (firstPollWave).
   */
  noteJoin(productId: number): void {
    // One entry per product with a room; past the bound the record starts again (a join then only
    // waits for a quiet room's next read, at most a second).
    if (this.joined.size >= 10_000 && !this.joined.has(productId)) this.joined.clear();
    this.joined.set(productId, Date.now());
  }

  /** When this process last made a ticket of the product (epoch ms; 0: not since it started). */
  joinedAt(productId: number): number {
    return this.joined.get(productId) ?? 0;
  }

  /** The last admission view this process read, however old; undefined before the first. */
  lastView(productId: number): AdmissionView | undefined {
    return this.views.get(productId);
  }

  /** One read per product at a time, shared by every poll that asks meanwhile. */
  refreshView(productId: number): Promise<AdmissionView | null> {
    return this.once(this.refreshing, productId, () =>
      this.repo
        .view(productId)
        .catch(this.unavailable)
        .then((view) => {
          if (view) this.views.set(productId, { ...view, at: Date.now() });
          return view;
        }),
    );
  }

  /**
   * A pre-queue ticket's place once drawn, from the drawn keys in memory; before the draw, its
   * lottery key's share of the key space (what paces its first poll after the start; `share` when
   * the caller has it already), with the view read for it. `started`: the sale has started by this
   * process's clock, so the draw is due (see firstAdmission).
   */
  async preQueuePlace(
    productId: number,
    userId: string,
    ticketId: string,
    started: boolean,
    share?: number,
  ): Promise<PreQueuePlace> {
    let view = await this.view(productId);
    if (started && view !== null && !drawSettled(view)) view = await this.firstAdmission(productId, view);
    const room = await this.room(productId);
    if (view === null || room === null) return { position: null, keyShare: null, view };
    const drawn = view.preQueue === null ? null : await this.drawnKeys(productId, view.preQueue);
    if (drawn === null) return { position: null, keyShare: share ?? keyShare(room.seed, ticketId), view };
    // Not among the keys loaded, or sharing its first 8 bytes with another: PostgreSQL has the last word.
    const position =
      drawnRank(room.seed, ticketId, drawn.keys) ??
      (await this.repo.position(productId, userId).catch(this.unavailable));
    return { position, keyShare: null, view };
  }

  /**
   * The view once it shows the draw and the first admission, which the admitter makes in its first
   * tick after the start: a pre-queue ticket polled in that moment is answered with its place (and,
   * among the first, its admission) rather than asked back a second later. One loop per product
   * reads the view every quarter tick (at most 25 ms) for every poll waiting meanwhile, for at most
   * DRAW_WAIT_TICKS ticks (and DRAW_WAIT_MAX_MS); then the last view read (a draw that takes longer
   * is waited for as before it). A failed read fails the polls waiting on it (503), as a poll's own
   * read would.
   */
  private firstAdmission(productId: number, read: AdmissionView): Promise<AdmissionView | null> {
    return this.once(this.awaitingDraw, productId, async () => {
      const until = Date.now() + Math.min(DRAW_WAIT_TICKS * this.tickMs, DRAW_WAIT_MAX_MS);
      const every = Math.min(25, this.tickMs / 4);
      let view: AdmissionView | null = read;
      while (view !== null && !drawSettled(view) && Date.now() + every <= until) {
        await new Promise((resolve) => setTimeout(resolve, every));
        view = await this.refreshView(productId);
      }
      return view;
    });
  }

  private async drawnKeys(productId: number, count: number): Promise<Drawn> {
    const known = this.drawn.get(productId);
    if (known && known.count === count) return known;
    return this.once(this.loadingDraw, productId, () =>
      this.repo
        .drawnKeys(productId)
        .catch(this.unavailable)
        .then((keys) => {
          const drawn = { keys, count: keys.length / 8 };
          this.drawn.set(productId, drawn);
          return drawn;
        }),
    );
  }

  /** The load of `key` in flight in `running`, shared, or a new one (forgotten once it settles). */
  private once<V>(running: Map<number, Promise<V>>, key: number, load: () => Promise<V>): Promise<V> {
    const inFlight = running.get(key);
    if (inFlight) return inFlight;
    const started = load().finally(() => running.delete(key));
    running.set(key, started);
    return started;
  }

  private readonly unavailable = (err: unknown): never => {
    throw new UnavailableError('postgres', this.http.retryAfterS, err);
  };
}
