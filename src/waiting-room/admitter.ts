// The waiting room's clock: every ADMISSION_TICK_MS each process looks at the products with a
// waiting room and, for each: (1) once the sale has started, seals the buckets that have ended, so
// their tickets hold places: one statement, committed on its own (a second process sealing at the
// same moment waits for the first, then finds nothing left to seal); the pre-queue's seal at the
// start is made in the transaction below, with the first admission; then, in one transaction
// holding the room's row, (2) pauses the admissions' clocks while no unit is left
// and starts them again when units come back, and (3) while the sale is open, makes one admission
// step when one is due. Then (4) it writes the drawn orders of the buckets it sealed and keeps what
// its polls read fresh. The room's row is taken FOR UPDATE SKIP LOCKED: one process at a time makes
// (2) and (3), the others skip; a process that dies mid-step leaves nothing half made. Ticks fall
// just after each bucket's end, so a bucket is sealed as soon as it can be. A quiet room (nothing to
// seal, nobody waiting, or no admission due) is read once a second, not every tick: only a join, a
// return of units or a lapsed admission makes work there, and the process that takes the join,
// returns the units or sees the expiry pass reads it at its next tick.
import { Injectable, Logger, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { WaitingRoomConfig } from '../config/app-config';
import { SoldOutBoardService } from '../inventory/sold-out-board.service';
import { MetricsService } from '../metrics/metrics.service';
import { QueueStates } from './queue-states';
import { AdmissionBudget } from './ticket-status';
import { ActiveRoom, AdmissionView, Query, Seal, WaitingRoomRepository } from './waiting-room.repository';

/**
 * How often a process asks PostgreSQL which products have a waiting room: a new room (or a changed
 * window) is taken up within this time, and a deployment without rooms pays one query a second.
 */
const ROOMS_EVERY_MS = 1000;

/** How old the admission view of a quiet room may be when a tick looks at it. */
const QUIET_EVERY_MS = 1000;

/** How long after a bucket's end its tick falls: the joins of its last moment have committed by then. */
const AFTER_BUCKET_MS = 5;

/** What one step under the room's row did. */
interface Step {
  seal: Seal | null;
  admitted: number;
  paused: boolean;
}

@Injectable()
export class Admitter implements OnModuleInit, OnModuleDestroy {
  private readonly log = new Logger('Admitter');
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;
  private rooms: ActiveRoom[] = [];
  private roomsReadAt = 0;
  private readonly budget: AdmissionBudget;

  constructor(
    private readonly config: WaitingRoomConfig,
    private readonly repo: WaitingRoomRepository,
    private readonly states: QueueStates,
    private readonly metrics: MetricsService,
    private readonly board: SoldOutBoardService,
  ) {
    this.budget = new AdmissionBudget(config.admissionRatio);
  }

  onModuleInit(): void {
    this.schedule();
  }

  async onModuleDestroy(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.tick().finally(() => {
        this.running = null;
        this.schedule();
      });
    }, this.nextTickInMs(Date.now()));
    this.timer.unref();
  }

  /**
   * A tick from now, or sooner when a room starts or a room's bucket ends before that: the
   * pre-queue's draw and first admission are made at the start, and each bucket is sealed just
   * after it ends, not up to a tick later.
   */
  nextTickInMs(now: number): number {
    let ms = this.config.admissionTickMs;
    for (const room of this.rooms) {
      if (room.startsAt !== null && room.startsAt > now) ms = Math.min(ms, room.startsAt - now + 1);
      else ms = Math.min(ms, room.bucketMs - (now % room.bucketMs) + AFTER_BUCKET_MS);
    }
    return ms;
  }

  /**
   * One round over every active room; a failing room is logged and counted, the others go on. The
   * rooms are read again once a second, and at once when this process took a join of a room it
   * does not know yet (a room just made: its first bucket is sealed as soon as any other).
   */
  async tick(): Promise<void> {
    const known = (productId: number) => this.rooms.some((r) => r.productId === productId);
    const unknownRoomJoined = this.states.joinedSince(this.roomsReadAt).some((productId) => !known(productId));
    if (unknownRoomJoined || Date.now() - this.roomsReadAt >= ROOMS_EVERY_MS) {
      try {
        this.rooms = await this.repo.activeRooms();
        this.roomsReadAt = Date.now();
      } catch {
        this.metrics.dependencyErrors.inc({ dependency: 'postgres' });
        return;
      }
    }
    await Promise.all(
      this.rooms.map((room) =>
        this.step(room).catch((err: Error) => {
          this.metrics.dependencyErrors.inc({ dependency: 'postgres' });
          this.log.warn(`waiting room of product ${room.productId}: ${err.message}`);
        }),
      ),
    );
  }

  /** Steps (1) to (4) for one room. */
  async step(room: ActiveRoom): Promise<void> {
    const now = Date.now();
    let view = await this.current(room, now);
    if (view === null) return;
    const sealDue = this.sealDue(room, view, now);
    // The pre-queue's draw is made with the first admission, in one transaction: the pre-queue's
    // first polls, waiting for the draw, find their admissions with it.
    const preQueueDraw = sealDue && view.sealedThrough < 0;
    if (sealDue && !preQueueDraw) {
      // Every later seal first, committed on its own: the polls waiting for it are answered at once.
      const seal = await this.repo.seal(room.productId);
      if (seal.through >= seal.from) {
        this.sealed(room, seal);
        view = (await this.states.refreshView(room.productId)) ?? view;
      }
    }
    if (preQueueDraw || this.pauseDue(view, now) || this.resumeDue(view) || this.due(room, view, now) > 0) {
      const step = await this.repo.exclusively(room.productId, (q) =>
        this.underRow(q, room, view as AdmissionView, preQueueDraw),
      );
      if (step !== null) {
        if (step.admitted > 0) this.metrics.queueAdmitted.inc({ product: String(room.productId) }, step.admitted);
        // The view after the step first: the pre-queue's polls its draw wakes answer from it, and one
        // read before the step (fresh for a while) would tell a ticket admitted by it that it is still
        // waiting. (A later bucket's seal above admits nothing: its polls are woken at once.)
        view = (await this.states.viewAfterCommit(room.productId)) ?? view;
        if (step.seal) this.sealed(room, step.seal);
      }
    }
    const label = String(room.productId);
    this.metrics.queueWaiting.set({ product: label }, Math.max(0, view.highWater - view.admittedThrough));
    this.metrics.queuePreQueue.set({ product: label }, view.preJoined);
    this.metrics.queueOutstanding.set({ product: label }, view.outstanding);
    this.metrics.queueUnitsLeft.set({ product: label }, view.unitsLeft);
    this.metrics.queueAdmissionRate.set({ product: label }, view.ratePerS);
    this.metrics.queueAdmissionsPaused.set({ product: label }, view.pausedSince === null ? 0 : 1);
  }

  /** A seal made: logged when it drew the pre-queue; its drawn orders written meanwhile (the room's next tick does not wait for them). */
  private sealed(room: ActiveRoom, seal: Seal): void {
    if (seal.draws.some((d) => d.bucket === 0))
      this.log.log(`product ${room.productId}: pre-queue of ${seal.draws[0].tickets} drawn`);
    void this.states
      .sealed(room.productId, seal)
      .catch((err: Error) => this.log.warn(`product ${room.productId}: a drawn order: ${err.message}`));
  }

  /**
   * Under the room's row: the pre-queue's seal (`seal`), the pause or its end, and an admission
   * step, each checked again against what PostgreSQL holds now (another process may have made
   * them since the view).
   */
  private async underRow(q: Query, room: ActiveRoom, view: AdmissionView, seal: boolean): Promise<Step> {
    const now = Date.now();
    const made = seal ? await this.repo.seal(room.productId, q) : null;
    const paused = this.pauseDue(view, now) ? await this.repo.pause(q, room.productId) : false;
    if (this.resumeDue(view)) await this.repo.resume(q, room.productId);
    if (!this.open(room, now)) return { seal: made, admitted: 0, paused };
    const state = await this.repo.admissionState(q, room.productId);
    const count = Math.min(this.budget.due(state.unitsLeft, state.outstanding), state.placed - state.admittedThrough);
    if (count > 0) await this.repo.admit(q, room.productId, state, count, room.admissionTtlS);
    return { seal: made, admitted: Math.max(0, count), paused };
  }

  /**
   * The admission view to decide on: a fresh one (a poll may have just read it), the last one of a
   * quiet room while it is younger than QUIET_EVERY_MS, else read now.
   */
  private current(room: ActiveRoom, now: number): Promise<AdmissionView | null> | AdmissionView {
    const fresh = this.states.freshView(room.productId);
    if (fresh) return fresh;
    const last = this.states.lastView(room.productId);
    return last && this.quiet(room, last, now) ? last : this.states.refreshView(room.productId);
  }

  /**
   * Whether a view read less than QUIET_EVERY_MS ago still holds for deciding: nothing to seal by
   * it, no admission due by it, none of its admissions lapsed since, no units returned by this
   * process in the last QUIET_EVERY_MS (a return counts from before the read, which may have missed
   * it), and no ticket made here in that time. What another process does is taken up by that
   * process's admitter, or by this one within a second.
   */
  private quiet(room: ActiveRoom, view: AdmissionView, now: number): boolean {
    if (now - view.at >= QUIET_EVERY_MS || this.sealDue(room, view, now) || this.due(room, view, now) > 0) return false;
    if (now - this.board.returnedAt(room.productId) < QUIET_EVERY_MS) return false;
    if (this.pauseDue(view, now) || this.resumeDue(view)) return false;
    // Nothing lapses while the room is paused.
    if (view.pausedSince === null) for (const batch of view.live) if (batch.expiresAt <= now) return false;
    return now - this.states.joinedAt(room.productId) >= QUIET_EVERY_MS;
  }

  private open(room: ActiveRoom, now: number): boolean {
    return (room.startsAt === null || now >= room.startsAt) && (room.endsAt === null || now < room.endsAt);
  }

  /**
   * Once the sale has started: the pre-queue not yet drawn, or tickets in buckets not yet sealed
   * (by the view, or made here since it was read).
   */
  private sealDue(room: ActiveRoom, view: AdmissionView, now: number): boolean {
    const started = room.startsAt === null || now >= room.startsAt;
    const joinedSince = this.states.joinedAt(room.productId) > view.at;
    return started && (view.sealedThrough < 0 || view.unsealed || joinedSince);
  }

  /** No unit left while admissions are live: their clocks stop (see the AdmissionPause migration). */
  private pauseDue(view: AdmissionView, now: number): boolean {
    return view.pausedSince === null && view.unitsLeft === 0 && view.live.some((b) => b.expiresAt > now);
  }

  /** Units back on sale after a pause: the paused admissions get the pause's length, and run again. */
  private resumeDue(view: AdmissionView): boolean {
    return view.pausedSince !== null && view.unitsLeft > 0;
  }

  /** Admissions due by a view while the sale is open: none when nobody placed waits beyond the cursor. */
  private due(room: ActiveRoom, view: AdmissionView, now: number): number {
    if (!this.open(room, now) || view.highWater <= view.admittedThrough) return 0;
    return this.budget.due(view.unitsLeft, view.outstanding);
  }
}
