// What this process knows of each waiting room, refreshed every tick by the Admitter and read by
// every join and poll without a round trip: the room's row (seed and draw), the queue's control
// values from Redis (epoch, base, draw), and the admission view from PostgreSQL (cursor,
// outstanding admissions, units left, measured rate). A poll's answer is at most one refresh old.
import { Injectable, Logger } from '@nestjs/common';
import { UnavailableError } from '../common/domain-errors';
import { DoorConfig, HttpConfig, WaitingRoomConfig } from '../config/app-config';
import { QueueControl, QueueStore } from './queue.store';
import { AdmissionView, RoomRow, WaitingRoomRepository } from './waiting-room.repository';

@Injectable()
export class QueueStates {
  private readonly log = new Logger('WaitingRoom');
  private readonly rooms = new Map<number, RoomRow>();
  private readonly controls = new Map<number, QueueControl>();
  private readonly views = new Map<number, AdmissionView>();
  private readonly marks = new Map<number, Array<string | null>>();
  private readonly refreshing = new Map<number, Promise<AdmissionView | null>>();
  /** How old an admission view may be when a poll reads it. */
  private readonly freshForMs: number;

  constructor(
    private readonly repo: WaitingRoomRepository,
    private readonly store: QueueStore,
    private readonly config: WaitingRoomConfig,
    private readonly http: HttpConfig,
    door: DoorConfig,
  ) {
    // A waiting ticket must learn that units came back as soon as a refusal from memory would (I8).
    this.freshForMs = Math.min(config.admissionTickMs, door.soldOutStaleMs);
  }

  /** The room's row; the seed never changes, the draw's fields are refreshed by refreshRoom. */
  async room(productId: number): Promise<RoomRow | null> {
    const known = this.rooms.get(productId);
    if (known) return known;
    return this.refreshRoom(productId);
  }

  async refreshRoom(productId: number): Promise<RoomRow | null> {
    const room = await this.repo.room(productId).catch((err) => {
      throw new UnavailableError('postgres', this.http.retryAfterS, err);
    });
    if (room) this.rooms.set(productId, room);
    return room;
  }

  /** The control values as last read (or read now when this process has none). */
  async control(productId: number): Promise<QueueControl> {
    return this.controls.get(productId) ?? this.readControl(productId);
  }

  /**
   * Reads the control values from Redis; when the control hash is missing (a new room, or Redis lost
   * it) makes it for a new epoch from PostgreSQL. UnavailableError when Redis or PostgreSQL fails.
   */
  async readControl(productId: number): Promise<QueueControl> {
    try {
      let control = await this.store.control(productId);
      if (control === null) control = await this.makeControl(productId);
      this.remember(productId, control);
      return control;
    } catch (err) {
      if (err instanceof UnavailableError) throw err;
      throw new UnavailableError('redis', this.http.retryAfterS, err);
    }
  }

  /** Reads every shard's mark (see lua/queue-join.lua); the admitter does it every tick. */
  async refreshMarks(productId: number, shards: number): Promise<void> {
    this.marks.set(productId, await this.store.marks(productId, shards));
  }

  /**
   * A shard's mark as last read; undefined before the first read. A remembered ticket is trusted
   * only while its shard's mark is the one it was read with: a shard lost with its master or a
   * flush has no mark, or a new one, by the next tick.
   */
  mark(productId: number, shard: number): string | null | undefined {
    return this.marks.get(productId)?.[shard];
  }

  /**
   * Makes the control values for a new epoch, one process at a time (holding the room's row); a
   * process that waited finds them made.
   */
  private async makeControl(productId: number): Promise<QueueControl> {
    const made = await this.repo.holding(productId, async (_room, q) => {
      const there = await this.store.control(productId);
      if (there !== null) return there;
      const room = await this.repo.newEpoch(q, productId);
      // The pre-queue is drawn once per room: an epoch that begins after the draw has none.
      await this.store.init(productId, {
        epoch: room.epoch,
        base: room.positionBase,
        pre: 0,
        drawn: room.preQueue !== null,
        shards: this.config.queueShards,
      });
      this.log.warn(
        `queue of product ${productId}: control made for epoch ${room.epoch}, positions from ${room.positionBase + 1}`,
      );
      return this.store.control(productId);
    });
    if (made === null) throw new Error(`product ${productId} has no waiting room row`);
    return made ?? Promise.reject(new Error('the queue control vanished as it was made'));
  }

  /** Keeps control values learnt elsewhere (an arrival call answers them too), unless older than what is known. */
  remember(productId: number, control: QueueControl): void {
    const known = this.controls.get(productId);
    if (known && known.epoch === control.epoch && known.arrivals > control.arrivals && (known.drawn || !control.drawn))
      return;
    this.controls.set(productId, control);
  }

  /**
   * The admission view, read again when older than the tick or SOLD_OUT_STALE_MS, whichever is
   * shorter (the admitter refreshes it every tick; a poll refreshes it in between).
   */
  async view(productId: number): Promise<AdmissionView | null> {
    const known = this.views.get(productId);
    if (known && Date.now() - known.at < this.freshForMs) return known;
    return this.refreshView(productId);
  }

  /** One read per product at a time, shared by every poll that asks meanwhile. */
  refreshView(productId: number): Promise<AdmissionView | null> {
    const running = this.refreshing.get(productId);
    if (running) return running;
    const read = this.repo
      .view(productId)
      .then((view) => {
        if (view) this.views.set(productId, { ...view, at: Date.now() });
        return view;
      })
      .catch((err) => {
        throw new UnavailableError('postgres', this.http.retryAfterS, err);
      })
      .finally(() => this.refreshing.delete(productId));
    this.refreshing.set(productId, read);
    return read;
  }
}
