// The waiting room's clock: every ADMISSION_TICK_MS each process looks at the products with a
// waiting room and, for each, (1) once the sale has started draws the pre-queue if nobody has,
// (2) pauses the admissions' clocks while no unit is left and starts them again when units come
// back, (3) while the sale is open makes one admission step when one is due, and (4) keeps what its
// polls read fresh. The draw and the admission steps hold the room's PostgreSQL row (FOR UPDATE SKIP
// LOCKED): one process at a time makes them, the others skip; a process that dies mid-step leaves
// nothing half made. A quiet room (nobody waiting, or no admission due) is read once a second, not
// every tick: only a return of units, a lapsed admission or a join where the budget has room makes
// one due there, and the process that returns the units, sees the expiry pass or takes the join
// reads it at its next tick.
import { Injectable, Logger, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { WaitingRoomConfig } from '../config/app-config';
import { SoldOutBoardService } from '../inventory/sold-out-board.service';
import { MetricsService } from '../metrics/metrics.service';
import { QueueStates } from './queue-states';
import { admissionsDue } from './ticket-status';
import { ActiveRoom, AdmissionView, WaitingRoomRepository } from './waiting-room.repository';

/**
 * How often a process asks PostgreSQL which products have a waiting room: a new room (or a changed
 * window) is taken up within this time, and a deployment without rooms pays one query a second.
 */
const ROOMS_EVERY_MS = 1000;

/** How old the admission view of a quiet room may be when a tick looks at it. */
const QUIET_EVERY_MS = 1000;

@Injectable()
export class Admitter implements OnModuleInit, OnModuleDestroy {
  private readonly log = new Logger('Admitter');
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;
  private rooms: ActiveRoom[] = [];
  private roomsReadAt = 0;

  constructor(
    private readonly config: WaitingRoomConfig,
    private readonly repo: WaitingRoomRepository,
    private readonly states: QueueStates,
    private readonly metrics: MetricsService,
    private readonly board: SoldOutBoardService,
  ) {}

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
   * A tick from now, or sooner when a room starts before that: its draw and first admission are
   * made at the start, not up to a tick after it.
   */
  private nextTickInMs(now: number): number {
    let ms = this.config.admissionTickMs;
    for (const room of this.rooms)
      if (room.startsAt !== null && room.startsAt > now) ms = Math.min(ms, room.startsAt - now + 1);
    return ms;
  }

  /** One round over every active room; a failing room is logged and counted, the others go on. */
  async tick(): Promise<void> {
    if (Date.now() - this.roomsReadAt >= ROOMS_EVERY_MS) {
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
    const row = await this.states.room(room.productId);
    const now = Date.now();
    const started = room.startsAt === null || now >= room.startsAt;
    const open = started && (room.endsAt === null || now < room.endsAt);
    const drew = row !== null && started && row.preQueue === null && (await this.draw(room.productId));
    // The first admission in the same tick as the draw: the pre-queue's first buyers wait one tick, not two.
    let view = drew ? await this.states.refreshView(room.productId) : await this.current(room.productId, now);
    if (row !== null && view !== null && (await this.pauseOrResume(room.productId, view, now)))
      view = await this.states.refreshView(room.productId);
    if (row !== null && open && view !== null && this.due(view) > 0 && (await this.admit(room)))
      view = await this.states.refreshView(room.productId);
    if (view) {
      const label = String(room.productId);
      this.metrics.queueWaiting.set({ product: label }, Math.max(0, view.highWater - view.admittedThrough));
      this.metrics.queuePreQueue.set({ product: label }, view.preJoined);
      this.metrics.queueOutstanding.set({ product: label }, view.outstanding);
      this.metrics.queueUnitsLeft.set({ product: label }, view.unitsLeft);
      this.metrics.queueAdmissionRate.set({ product: label }, view.ratePerS);
      this.metrics.queueAdmissionsPaused.set({ product: label }, view.pausedSince === null ? 0 : 1);
    }
  }

  /**
   * The admission view to decide on: a fresh one (a poll may have just read it), the last one of a
   * quiet room while it is younger than QUIET_EVERY_MS, else read now.
   */
  private current(productId: number, now: number): Promise<AdmissionView | null> | AdmissionView {
    const fresh = this.states.freshView(productId);
    if (fresh) return fresh;
    const last = this.states.lastView(productId);
    return last && this.quiet(last, productId, now) ? last : this.states.refreshView(productId);
  }

  /**
   * Whether a view read less than QUIET_EVERY_MS ago still holds for deciding: no admission due by
   * it, none of its admissions lapsed since, no units returned by this process in the last
   * QUIET_EVERY_MS (a return counts from before the read, which may have missed it), and, where the
   * budget has room but nobody waited, no ticket made here in that time. What another process does
   * is taken up by that process's admitter, or by this one within a second.
   */
  private quiet(view: AdmissionView, productId: number, now: number): boolean {
    const budget = admissionsDue(this.config.admissionRatio, view.unitsLeft, view.outstanding);
    if (now - view.at >= QUIET_EVERY_MS || (budget > 0 && view.highWater > view.admittedThrough)) return false;
    if (now - this.board.returnedAt(productId) < QUIET_EVERY_MS) return false;
    if (this.pauseDue(view, now) || this.resumeDue(view)) return false;
    // Nothing lapses while the room is paused.
    if (view.pausedSince === null) for (const batch of view.live) if (batch.expiresAt <= now) return false;
    return budget === 0 || now - this.states.joinedAt(productId) >= QUIET_EVERY_MS;
  }

  /** No unit left while admissions are live: their clocks stop (see the AdmissionPause migration). */
  private pauseDue(view: AdmissionView, now: number): boolean {
    return view.pausedSince === null && view.unitsLeft === 0 && view.live.some((b) => b.expiresAt > now);
  }

  /** Units back on sale after a pause: the paused admissions get the pause's length, and run again. */
  private resumeDue(view: AdmissionView): boolean {
    return view.pausedSince !== null && view.unitsLeft > 0;
  }

  /** Pauses or resumes the room's admission clocks where the view says so; true when it changed the room. */
  private async pauseOrResume(productId: number, view: AdmissionView, now: number): Promise<boolean> {
    const change = this.pauseDue(view, now) ? 'pause' : this.resumeDue(view) ? 'resume' : null;
    if (change === null) return false;
    return (await this.repo.exclusively(productId, (_row, q) => this.repo[change](q, productId))) === true;
  }

  /** Admissions due by a view: none when nobody waits beyond the cursor. */
  private due(view: AdmissionView): number {
    if (view.highWater <= view.admittedThrough) return 0;
    return admissionsDue(this.config.admissionRatio, view.unitsLeft, view.outstanding);
  }

  /** One admission step under the room's row; true when it admitted anyone. */
  private async admit(room: ActiveRoom): Promise<boolean> {
    const step = await this.repo.exclusively(room.productId, (row, q) =>
      this.repo.admit(q, row, this.config.admissionRatio, room.admissionTtlS),
    );
    if (!step?.batch) return false;
    const n = step.batch.last - step.batch.first + 1;
    this.metrics.queueAdmitted.inc({ product: String(room.productId) }, n);
    return true;
  }

  /**
   * The draw (unless the first arrival made it already): it holds the queue's counter row, which
   * every group of joins takes too, so the pre-queue closes at one moment for every process; then
   * the room's row records it and the seed is published.
   */
  private async draw(productId: number): Promise<boolean> {
    const started = Date.now();
    const drawn = await this.repo.exclusively(productId, async (row, q) =>
      row.preQueue !== null ? null : this.repo.draw(q, productId),
    );
    if (drawn !== null) this.log.log(`product ${productId}: pre-queue of ${drawn} drawn in ${Date.now() - started} ms`);
    // Also when another process drew (or is drawing): this process's copy of the row learns it, or
    // it would come back here every tick.
    await this.states.refreshRoom(productId);
    return drawn !== null;
  }
}
