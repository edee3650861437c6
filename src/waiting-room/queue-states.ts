// What this process knows of each waiting room, so that a join and a poll need no extra round
// trip: the room's row (its seeds' commitment, its buckets' width), the admission view (cursor,
// outstanding admissions, units left, measured rate, positions handed out, buckets sealed), kept
// fresh by the Admitter's ticks and by polls, and the draws of the sealed buckets with their drawn
// orders, which place any ticket by a binary search, without a statement.
import { Injectable } from '@nestjs/common';
import { UnavailableError } from '../common/domain-errors';
import { DoorConfig, HttpConfig, WaitingRoomConfig } from '../config/app-config';
import { drawnOrder, drawnRank, keyShare, lotteryOrder } from './lottery';
import { AdmissionView, Draw, RoomRow, Seal, WaitingRoomRepository } from './waiting-room.repository';

/**
 * How long, in admission ticks, a poll of a ticket whose bucket has ended may wait for its draw
 * (and the admission step made with it): at least DRAW_WAIT_MIN_MS however short ADMISSION_TICK_MS
 * is (a seal on a busy machine), at most DRAW_WAIT_MAX_MS however long; then it is answered as
 * before the draw.
 */
export const DRAW_WAIT_TICKS = 3;
export const DRAW_WAIT_MIN_MS = 500;
export const DRAW_WAIT_MAX_MS = 3000;

/**
 * Until when (epoch ms) a poll of an unplaced ticket may wait for its bucket's draw: for
 * DRAW_WAIT_TICKS ticks (DRAW_WAIT_MIN_MS at least) from the bucket's end (the pre-queue's is the start), never more than
 * DRAW_WAIT_MAX_MS from now; `now` (no wait) before the start for the pre-queue, whose polls are
 * paced by lottery key instead, and for a bucket that ends later than DRAW_WAIT_MAX_MS from now.
 */
export function drawWaitUntil(bucket: number, bucketMs: number, startsAt: number | null, now: number, tickMs: number) {
  const end = bucket === 0 ? (startsAt ?? now) : (bucket + 1) * bucketMs;
  if (end > now && (bucket === 0 || end - now > DRAW_WAIT_MAX_MS)) return now;
  const wait = Math.min(Math.max(DRAW_WAIT_TICKS * tickMs, DRAW_WAIT_MIN_MS), DRAW_WAIT_MAX_MS);
  return Math.min(now + DRAW_WAIT_MAX_MS, Math.max(now, end) + wait);
}

/** Where a ticket stands before its place is known: its bucket's draw is awaited, or (the pre-queue before the start) its key's share. */
export interface Place {
  position: number | null;
  /** Before the pre-queue's draw, its lottery key's share of the key space (see keyShare); else null. */
  keyShare: number | null;
}

/** A room's draws as this process holds them. */
interface Draws {
  byBucket: Map<number, Draw>;
  /** Every bucket up to this one is sealed and its draw (if any) is in byBucket. */
  through: number;
  /** The highest bucket with a draw in byBucket. */
  last: number;
}

/** A poll waiting for its bucket's draw. */
interface Waiter {
  bucket: number;
  ticketId: string;
  until: number;
  resolve: (position: number | null) => void;
  reject: (err: unknown) => void;
  done: boolean;
}

@Injectable()
export class QueueStates {
  private readonly rooms = new Map<number, RoomRow>();
  private readonly views = new Map<number, AdmissionView>();
  /** productId -> when this process last made a ticket of it (the admitter asks). */
  private readonly joined = new Map<number, number>();
  private readonly draws = new Map<number, Draws>();
  private readonly waiters = new Map<number, Waiter[]>();
  /** The products whose loop of waiting polls runs (see follow). */
  private readonly following = new Set<number>();
  private readonly refreshing = new Map<number, Promise<AdmissionView | null>>();
  private readonly loadingDraws = new Map<number, Promise<Draws>>();
  private readonly loadingOrders = new Map<string, Promise<Buffer | null>>();
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
   * second later: its bucket is to be sealed, and before the start the pre-queue's size paces the
   * first polls (firstPollWave).
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

  /** The products this process made a ticket of since `since` (epoch ms). */
  joinedSince(since: number): number[] {
    const ids: number[] = [];
    for (const [productId, at] of this.joined) if (at >= since) ids.push(productId);
    return ids;
  }

  /** The last admission view this process read, however old; undefined before the first. */
  lastView(productId: number): AdmissionView | undefined {
    return this.views.get(productId);
  }

  /**
   * The view from a read sent after this call, so that it holds what this process has just
   * committed: a read already in flight (which may have started before the commit) is let finish
   * first, and not shared.
   */
  async viewAfterCommit(productId: number): Promise<AdmissionView | null> {
    await this.refreshing.get(productId)?.catch(() => undefined);
    return this.refreshView(productId);
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
   * A ticket's place, from its bucket's draw in memory. Before the pre-queue's draw, its lottery
   * key's share instead (what paces its first poll after the start; `share` when the caller has it
   * already). `waitUntil`: how long (epoch ms) the caller may wait for a draw not made yet; the
   * draw and the admission step made with it then answer the poll together.
   */
  async place(productId: number, bucket: number, ticketId: string, waitUntil: number, share?: number): Promise<Place> {
    const position = await this.placeInBucket(productId, bucket, ticketId, waitUntil);
    if (position !== null || bucket !== 0) return { position, keyShare: null };
    const room = await this.room(productId);
    return { position, keyShare: room === null ? null : (share ?? keyShare(room.seed, ticketId)) };
  }

  /**
   * Draws this process made itself (the Admitter's seal), with the view read after them: its own
   * waiting polls are answered at once, and the drawn orders are written for the other processes.
   */
  async sealed(productId: number, seal: Seal): Promise<void> {
    const draws = this.draws.get(productId);
    // Taken in only when nothing between was missed: every draw after `through` is then known.
    if (draws !== undefined && draws.through >= seal.from - 1) {
      for (const d of seal.draws) {
        draws.byBucket.set(d.bucket, d);
        draws.last = Math.max(draws.last, d.bucket);
      }
      draws.through = Math.max(draws.through, seal.through);
    }
    for (const d of seal.draws) if (d.seed !== null && d.tickets > 0) await this.orderOf(productId, d);
    this.wake(productId);
  }

  /** The draws of a room this process holds (the public record reads them too). */
  async drawsOf(productId: number): Promise<Draw[]> {
    const view = await this.view(productId);
    const draws = await this.loadDraws(productId, view?.sealedThrough ?? -1);
    return [...draws.byBucket.values()].sort((a, b) => a.bucket - b.bucket);
  }

  /** A sealed bucket's tickets in drawn order (the public record of one draw); null for an unknown bucket. */
  async drawnTickets(productId: number, bucket: number): Promise<{ draw: Draw; tickets: string[] } | null> {
    const draw = (await this.drawsOf(productId)).find((d) => d.bucket === bucket);
    if (draw === undefined || draw.seed === null) return null;
    const ids = await this.repo.bucketTickets(productId, bucket).catch(this.unavailable);
    return { draw, tickets: lotteryOrder(draw.seed, ids) };
  }

  private async placeInBucket(productId: number, bucket: number, ticketId: string, until: number) {
    const known = this.draws.get(productId);
    const draw = known && bucket <= known.through ? known.byBucket.get(bucket) : undefined;
    if (draw?.keys) return this.rankIn(productId, draw, ticketId);
    // No time to wait (a join's answer: its bucket is open; a pre-queue ticket before the start): no read.
    if (until <= Date.now()) return null;
    return new Promise<number | null>((resolve, reject) => {
      const waiter = { bucket, ticketId, until, resolve, reject, done: false };
      const list = this.waiters.get(productId);
      if (list) list.push(waiter);
      else this.waiters.set(productId, [waiter]);
      if (!this.following.has(productId)) void this.follow(productId);
    });
  }

  /**
   * One loop per product while polls wait for draws: it reads how far the room is sealed every
   * quarter tick (at most 25 ms), loads the draws and drawn orders the waiters need, and answers
   * each waiter once its place is known or its time is up. A failed read fails the polls waiting on
   * it (503), as a poll's own read would.
   */
  private async follow(productId: number): Promise<void> {
    const every = Math.min(25, this.tickMs / 4);
    this.following.add(productId);
    try {
      for (;;) {
        const waiting = this.waiters.get(productId) ?? [];
        if (waiting.length === 0) break;
        const draws = this.draws.get(productId);
        const needed = Math.max(...waiting.map((w) => w.bucket));
        if (draws === undefined || needed > draws.through) {
          const through = await this.repo.sealedThrough(productId).catch(this.unavailable);
          if (draws === undefined || through > draws.through) await this.loadDraws(productId, through);
        }
        await this.answerWaiters(productId);
        if ((this.waiters.get(productId)?.length ?? 0) === 0) break;
        await new Promise((resolve) => setTimeout(resolve, every));
      }
    } catch (err) {
      const failed = this.waiters.get(productId) ?? [];
      this.waiters.delete(productId);
      for (const w of failed) w.reject(err);
    }
    this.following.delete(productId);
    // A poll that came as the loop ended is not left without one.
    if ((this.waiters.get(productId)?.length ?? 0) > 0) void this.follow(productId);
  }

  /** A draw of this process's own was added: its waiting polls are answered now. */
  private wake(productId: number): void {
    if ((this.waiters.get(productId)?.length ?? 0) > 0) void this.answerWaiters(productId).catch(() => undefined);
  }

  private async answerWaiters(productId: number): Promise<void> {
    const draws = this.draws.get(productId);
    const now = Date.now();
    for (const w of [...(this.waiters.get(productId) ?? [])]) {
      if (w.done) continue;
      const sealed = draws !== undefined && w.bucket <= draws.through;
      const draw = sealed ? draws.byBucket.get(w.bucket) : undefined;
      let position: number | null | undefined;
      if (draw !== undefined && (await this.orderOf(productId, draw)) !== null)
        position = await this.rankIn(productId, draw, w.ticketId);
      else if (now >= w.until || (sealed && draw === undefined)) position = null;
      if (position === undefined || w.done) continue;
      w.done = true;
      w.resolve(position);
    }
    // Waiters may have come while this ran: they stay.
    this.waiters.set(
      productId,
      (this.waiters.get(productId) ?? []).filter((w) => !w.done),
    );
  }

  /** The draws of the room's buckets through `sealedThrough`, loaded once (shared by every poll that asks meanwhile). */
  private async loadDraws(productId: number, sealedThrough: number): Promise<Draws> {
    const known = this.draws.get(productId);
    if (known && known.through >= sealedThrough) return known;
    return this.once(this.loadingDraws, productId, async () => {
      const draws = this.draws.get(productId) ?? { byBucket: new Map(), through: -1, last: -1 };
      const more = await this.repo.draws(productId, draws.last).catch(this.unavailable);
      for (const d of more) {
        draws.byBucket.set(d.bucket, d);
        draws.last = Math.max(draws.last, d.bucket);
      }
      draws.through = Math.max(draws.through, sealedThrough);
      this.draws.set(productId, draws);
      return draws;
    });
  }

  /**
   * A draw's order (8-byte key prefixes in drawn order): as loaded, else read from PostgreSQL, else
   * drawn here from the bucket's ticket ids and written for the others, unless another process is
   * drawing it at this moment (null then: asked again at the next turn of the loop).
   */
  private async orderOf(productId: number, draw: Draw): Promise<Buffer | null> {
    const seed = draw.seed;
    if (draw.keys !== null || seed === null) return draw.keys;
    const keys = await this.onceBy(this.loadingOrders, `${productId}:${draw.bucket}`, async () => {
      const written = await this.repo.drawnOrder(productId, draw.bucket).catch(this.unavailable);
      if (written !== null) return written;
      return this.repo.drawOrderOnce(productId, draw.bucket, (ids) => drawnOrder(seed, ids)).catch(this.unavailable);
    });
    if (keys !== null) draw.keys = keys;
    return keys;
  }

  /** A ticket's position in its drawn bucket. */
  private async rankIn(productId: number, draw: Draw, ticketId: string): Promise<number | null> {
    if (draw.seed === null || draw.keys === null) return null;
    // Not among the keys, or sharing its first 8 bytes with another: the full keys decide.
    let rank = drawnRank(draw.seed, ticketId, draw.keys);
    if (rank === null) {
      const ids = await this.repo.bucketTickets(productId, draw.bucket).catch(this.unavailable);
      const at = lotteryOrder(draw.seed, ids).indexOf(ticketId);
      rank = at < 0 ? null : at + 1;
    }
    return rank === null ? null : draw.first + rank - 1;
  }

  /** The load of `key` in flight in `running`, shared, or a new one (forgotten once it settles). */
  private once<V>(running: Map<number, Promise<V>>, key: number, load: () => Promise<V>): Promise<V> {
    return this.onceBy(running, key, load);
  }

  private onceBy<K, V>(running: Map<K, Promise<V>>, key: K, load: () => Promise<V>): Promise<V> {
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
