// Readers of the stream: a page of events after a cursor, waiting up to `wait` for the first when
// there is none yet (long-poll), and the same as a Server-Sent Events stream. Waiting readers of a
// process share one timer (EVENTS_POLL_MS) and each reads on every tick; a reader costs nothing
// while it is not waiting. Readers end when the server stops listening (a graceful stop).
import type { Server } from 'node:http';
import { Injectable } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { EventsConfig } from '../config/app-config';
import { CursorAheadError, EventsPrunedError, ProductNotFoundError } from '../common/domain-errors';
import { MetricsService } from '../metrics/metrics.service';
import { before, EventCursor, formatCursor, parseCursor, START } from './event-cursor';
import { EventsRepository, StreamEvent } from './events.repository';

export interface EventPage {
  events: StreamEvent[];
  /** Where to read on from: the last event's cursor, or the cursor asked when there was none. */
  next: string;
}

@Injectable()
export class EventsService {
  private waiters: Array<() => void> = [];
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly config: EventsConfig,
    private readonly repo: EventsRepository,
    private readonly metrics: MetricsService,
    private readonly http: HttpAdapterHost,
  ) {}

  /**
   * Up to `limit` events after `after`, waiting up to `waitMs` for the first. EVENTS_PRUNED when
   * events after `after` were deleted (they would be missing from the answer), CURSOR_AHEAD when
   * `after` is past the newest event, PRODUCT_NOT_FOUND when `productId` names no product.
   */
  async page(after: EventCursor, limit: number, waitMs: number, productId?: number): Promise<EventPage> {
    const until = Date.now() + waitMs;
    for (let first = true; ; first = false) {
      const events = await this.read(after, limit, productId);
      if (first && events.length === 0) await this.checkEmptyStart(after, productId);
      if (events.length > 0 || Date.now() >= until || !this.serving()) {
        this.metrics.eventsServed.inc({ via: 'poll' }, events.length);
        return { events, next: events.length > 0 ? events[events.length - 1].cursor : formatCursor(after) };
      }
      await this.tick();
    }
  }

  /**
   * Sends every event after `after` to `send` as it becomes readable, until `closed()` says the
   * client left or the server stops; calls `idle` when a while (15 s) passed without an event.
   */
  async follow(
    after: EventCursor,
    productId: number | undefined,
    send: (e: StreamEvent) => void,
    idle: () => void,
    closed: () => boolean,
  ): Promise<void> {
    let cursor = after;
    let quietSince = Date.now();
    while (!closed() && this.serving()) {
      const events = await this.read(cursor, 500, productId);
      for (const e of events) send(e);
      this.metrics.eventsServed.inc({ via: 'sse' }, events.length);
      if (events.length > 0) {
        cursor = parseCursor(events[events.length - 1].cursor) as EventCursor;
        quietSince = Date.now();
        continue;
      }
      if (Date.now() - quietSince >= 15_000) {
        idle();
        quietSince = Date.now();
      }
      await this.tick();
    }
  }

  private async read(after: EventCursor, limit: number, productId?: number): Promise<StreamEvent[]> {
    const events = await this.repo.after(after, limit, productId);
    // Checked after the read: a prune that ran before it shows here, so no answer hides a gap.
    if (!before(START, after)) return events;
    const pruned = await this.repo.prunedThrough();
    if (before(after, pruned)) throw new EventsPrunedError(formatCursor(pruned));
    return events;
  }

  /** An empty first read: is it because the filter or the cursor names something that does not exist? */
  private async checkEmptyStart(after: EventCursor, productId?: number): Promise<void> {
    if (productId !== undefined && !(await this.repo.productExists(productId)))
      throw new ProductNotFoundError(productId);
    if (!before(START, after)) return;
    const [head, pruned] = await Promise.all([this.repo.head(), this.repo.prunedThrough()]);
    const newest = before(head, pruned) ? pruned : head;
    if (before(newest, after)) throw new CursorAheadError(formatCursor(after), formatCursor(newest));
  }

  private serving(): boolean {
    const server = this.http.httpAdapter?.getHttpServer() as Server | undefined;
    return server?.listening ?? true;
  }

  /** Resolves at the next tick of the shared timer. */
  private tick(): Promise<void> {
    return new Promise((resolve) => {
      this.waiters.push(resolve);
      if (this.timer !== null) return;
      this.timer = setTimeout(() => {
        this.timer = null;
        const waiting = this.waiters;
        this.waiters = [];
        for (const w of waiting) w();
      }, this.config.pollMs);
    });
  }
}
