// The waiting room's clock: every ADMISSION_TICK_MS each process looks at the products with a
// waiting room and, for each, (1) reads the queue's control values (making them for a new epoch
// when Redis lost them), (2) once the sale has started draws the pre-queue if nobody has, (3) while
// the sale is open makes one admission step, and (4) refreshes what its polls read. The draw and the
// admission steps hold the room's PostgreSQL row (FOR UPDATE SKIP LOCKED): one process at a time
// makes them, the others skip; a process that dies mid-step leaves nothing half made.
import { Injectable, Logger, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { WaitingRoomConfig } from '../config/app-config';
import { MetricsService } from '../metrics/metrics.service';
import { QueueControl, QueueStore, positionsTaken } from './queue.store';
import { QueueStates } from './queue-states.service';
import { ActiveRoom, Query, RoomRow, WaitingRoomRepository } from './waiting-room.repository';

/** Pre-queue members read per shard per round of the draw's merge. */
const DRAW_CHUNK = 2000;
/**
 * How often a process asks PostgreSQL which products have a waiting room: a new room (or a changed
 * window) is taken up within this time, and a deployment without rooms pays one query a second.
 */
const ROOMS_EVERY_MS = 1000;

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
    private readonly store: QueueStore,
    private readonly states: QueueStates,
    private readonly metrics: MetricsService,
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
    }, this.config.admissionTickMs);
    this.timer.unref();
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
    const rooms = this.rooms;
    await Promise.all(
      rooms.map((room) =>
        this.step(room).catch((err: Error) => {
          this.metrics.dependencyErrors.inc({ dependency: 'queue' });
          this.log.warn(`waiting room of product ${room.productId}: ${err.message}`);
        }),
      ),
    );
  }

  /** Steps (1) to (4) for one room. */
  async step(room: ActiveRoom): Promise<void> {
    const control = await this.states.readControl(room.productId);
    const now = Date.now();
    const started = room.startsAt === null || now >= room.startsAt;
    const open = started && (room.endsAt === null || now < room.endsAt);
    if (started && !control.drawn) await this.draw(room.productId, control);
    else if (open && control.drawn) await this.admit(room, control);
    await this.states.refreshMarks(room.productId, control.shards);
    const view = await this.states.refreshView(room.productId);
    if (view) {
      const label = String(room.productId);
      this.metrics.queueWaiting.set({ product: label }, Math.max(0, positionsTaken(control) - view.admittedThrough));
      this.metrics.queueOutstanding.set({ product: label }, view.outstanding);
      this.metrics.queueUnitsLeft.set({ product: label }, view.unitsLeft);
      this.metrics.queueAdmissionRate.set({ product: label }, view.ratePerS);
    }
  }

  private async admit(room: ActiveRoom, control: QueueControl): Promise<void> {
    // Nothing to admit by what this process read last (nobody waiting, or the budget spent): no lock
    // and no write. The step itself decides again under the room's row.
    const view = await this.states.view(room.productId);
    if (
      view !== null &&
      (positionsTaken(control) <= view.admittedThrough ||
        Math.ceil(this.config.admissionRatio * view.unitsLeft) <= view.outstanding)
    )
      return;
    const step = await this.repo.exclusively(room.productId, (row, q) =>
      this.repo.admit(q, row, positionsTaken(control), this.config.admissionRatio, room.admissionTtlS),
    );
    if (step?.batch) {
      const n = step.batch.last - step.batch.first + 1;
      this.metrics.queueAdmitted.inc({ product: String(room.productId) }, n);
    }
  }

  /**
   * The draw: closes the pre-queue in every shard, then merges the shards' pre-queues (each already
   * in lottery order, see lottery.ts) and writes each ticket's position; positions are final once
   * written, and the draw is deterministic, so one that a crash cut short is simply made again.
   */
  private async draw(productId: number, control: QueueControl): Promise<void> {
    const started = Date.now();
    const drawn = await this.repo.exclusively(productId, async (row: RoomRow, q: Query) => {
      // Drawn already, in this epoch (by another process that did not get to tell Redis): its size stands.
      if (row.preQueue !== null) return row.preQueue;
      await this.store.closePreQueue(productId, control.shards);
      const size = await this.mergePreQueues(productId, control);
      await this.repo.recordDraw(q, productId, size);
      return size;
    });
    if (drawn === null) return;
    // After the commit: Redis never says "drawn" for a draw PostgreSQL does not hold.
    if (!(await this.store.markDrawn(productId, control.epoch, drawn)))
      throw new Error('the queue was lost during the draw; it is made again at the next tick');
    this.log.log(`product ${productId}: pre-queue of ${drawn} drawn in ${Date.now() - started} ms`);
    await this.states.refreshRoom(productId);
  }

  private async mergePreQueues(productId: number, control: QueueControl): Promise<number> {
    const shards = control.shards;
    const heads: string[][] = Array.from({ length: shards }, () => []);
    const after: string[] = new Array<string>(shards).fill('');
    const done: boolean[] = new Array<boolean>(shards).fill(false);
    const writes: Array<Array<[string, number]>> = Array.from({ length: shards }, () => []);
    const refill = async (s: number) => {
      const chunk = await this.store.preQueueChunk(productId, s, after[s], DRAW_CHUNK);
      if (chunk.length < DRAW_CHUNK) done[s] = true;
      if (chunk.length > 0) after[s] = chunk[chunk.length - 1];
      heads[s] = chunk;
    };
    const flush = async (s: number) => {
      await this.store.writePositions(productId, s, writes[s]);
      writes[s] = [];
    };
    await Promise.all(heads.map((_, s) => refill(s)));
    const cursor = new Array<number>(shards).fill(0);
    let position = control.base;
    for (;;) {
      let best = -1;
      for (let s = 0; s < shards; s++) {
        if (cursor[s] >= heads[s].length) continue;
        if (best === -1 || heads[s][cursor[s]] < heads[best][cursor[best]]) best = s;
      }
      if (best === -1) break;
      const member = heads[best][cursor[best]++];
      writes[best].push([member.slice(member.indexOf(':') + 1), ++position]);
      if (writes[best].length >= DRAW_CHUNK) await flush(best);
      if (cursor[best] >= heads[best].length && !done[best]) {
        await refill(best);
        cursor[best] = 0;
      }
    }
    await Promise.all(writes.map((_, s) => flush(s)));
    return position - control.base;
  }
}
