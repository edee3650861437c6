// Reading the event stream, pruning it, and the webhook's delivery cursor and lease (event_marks).
//
// The rule that makes a cursor safe: an event is handed out only when its transaction is older than
// every transaction still running (tx < the current snapshot's xmin). Event ids are taken from a
// sequence before commit, so a plain `id > cursor` would pass over an event whose transaction took a
// smaller id and committed later; by (tx, id), with that horizon, whatever is still to commit sorts
// after everything already handed out.
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { EventCursor, formatCursor, START } from './event-cursor';

/** One event as readers get it. */
export interface StreamEvent {
  cursor: string;
  type: string;
  productId: number;
  orderId: number | null;
  at: string;
  data: Record<string, unknown>;
}

interface EventRow {
  tx: string;
  id: string;
  product_id: number;
  order_id: string | null;
  type: string;
  data: Record<string, unknown>;
  at: Date;
}

const HORIZON = 'pg_snapshot_xmin(pg_current_snapshot())';

/** The tag of the webhook's and the pruner's statements, so that tests can tell them from a reader's. */
export const EVENT_CLOCK = '/* event stream clock */';

const toEvent = (r: EventRow): StreamEvent => ({
  cursor: formatCursor({ tx: r.tx, id: r.id }),
  type: r.type,
  productId: r.product_id,
  orderId: r.order_id === null ? null : Number(r.order_id),
  at: r.at.toISOString(),
  data: r.data,
});

export interface WebhookMark {
  cursor: EventCursor;
  failures: number;
}

@Injectable()
export class EventsRepository {
  constructor(private readonly db: DataSource) {}

  /** Up to `limit` events after `cursor` (of one product when `productId` is given), in stream order. */
  async after(cursor: EventCursor, limit: number, productId?: number, tag = ''): Promise<StreamEvent[]> {
    const rows: EventRow[] = await this.db.query(
      // Ordered by the columns (e.tx), not by the text output columns that bear the same names.
      `${tag} SELECT e.tx::text AS tx, e.id::text AS id, product_id, order_id::text, type, data, at FROM order_events e
        WHERE (e.tx, e.id) > ($1::xid8, $2::bigint) AND e.tx < ${HORIZON} ${productId === undefined ? '' : 'AND product_id = $4'}
        ORDER BY e.tx, e.id LIMIT $3`,
      productId === undefined ? [cursor.tx, cursor.id, limit] : [cursor.tx, cursor.id, limit, productId],
    );
    return rows.map(toEvent);
  }

  /** The cursor of the newest event a reader may have now (START when there is none). */
  async head(tag = ''): Promise<EventCursor> {
    const rows: Array<{ tx: string; id: string }> = await this.db.query(
      `${tag} SELECT e.tx::text AS tx, e.id::text AS id FROM order_events e WHERE e.tx < ${HORIZON}
        ORDER BY e.tx DESC, e.id DESC LIMIT 1`,
    );
    return rows.length === 0 ? START : { tx: rows[0].tx, id: rows[0].id };
  }

  /** Whether the product exists (a filter naming none is refused, not answered with nothing). */
  async productExists(productId: number): Promise<boolean> {
    const rows: unknown[] = await this.db.query('SELECT 1 FROM products WHERE id = $1', [productId]);
    return rows.length > 0;
  }

  /** Events up to this cursor were pruned (START: none). */
  async prunedThrough(): Promise<EventCursor> {
    const rows: Array<{ tx: string; id: string }> = await this.db.query(
      `SELECT tx::text, id::text FROM event_marks WHERE name = 'pruned'`,
    );
    return rows.length === 0 ? START : { tx: rows[0].tx, id: rows[0].id };
  }

  /**
   * Deletes up to `batch` of the oldest events older than `retentionS` seconds and not after `keep`
   * (the webhook's cursor, when there is a webhook), and moves the pruned mark; answers how many.
   */
  async prune(retentionS: number, keep: EventCursor | null, batch: number): Promise<number> {
    return this.db.transaction(async (m) => {
      // One pruner at a time (every process runs one; 1886549358 is 'prun' in ASCII); the others skip this round.
      const [lock]: Array<{ ok: boolean }> = await m.query(
        `${EVENT_CLOCK} SELECT pg_try_advisory_xact_lock(1886549358, 0) AS ok`,
      );
      if (!lock.ok) return 0;
      const rows: Array<{ tx: string; id: string }> = await m.query(
        `${EVENT_CLOCK} WITH oldest AS (
           SELECT tx, id, at FROM order_events ORDER BY tx, id LIMIT $2
         ), gone AS (
           DELETE FROM order_events e USING oldest
            WHERE e.tx = oldest.tx AND e.id = oldest.id AND oldest.at < now() - make_interval(secs => $1)
              AND ($3::xid8 IS NULL OR (e.tx, e.id) <= ($3::xid8, $4::bigint))
           RETURNING e.tx, e.id
         )
         SELECT g.tx::text AS tx, g.id::text AS id FROM gone g ORDER BY g.tx DESC, g.id DESC`,
        [retentionS, batch, keep?.tx ?? null, keep?.id ?? null],
      );
      if (rows.length === 0) return 0;
      await m.query(
        `${EVENT_CLOCK} UPDATE event_marks SET tx = $1::xid8, id = $2::bigint
          WHERE name = 'pruned' AND (tx, id) < ($1::xid8, $2::bigint)`,
        [rows[0].tx, rows[0].id],
      );
      return rows.length;
    });
  }

  /** Makes the webhook's mark at the stream's head, when there is none yet: a new webhook gets what happens from now on. */
  async openWebhook(): Promise<void> {
    const head = await this.head(EVENT_CLOCK);
    await this.db.query(
      `${EVENT_CLOCK} INSERT INTO event_marks (name, tx, id) VALUES ('webhook', $1::xid8, $2::bigint) ON CONFLICT (name) DO NOTHING`,
      [head.tx, head.id],
    );
  }

  /**
   * Takes or renews the webhook's lease for `leaseMs` when it is free, lapsed or already ours;
   * answers where delivery stands, or null when another process holds the lease.
   */
  async leaseWebhook(owner: string, leaseMs: number): Promise<WebhookMark | null> {
    // An UPDATE answers [rows, count] through TypeORM's query().
    const [rows] = await this.db.query<[Array<{ tx: string; id: string; failures: number }>, number]>(
      `${EVENT_CLOCK} UPDATE event_marks SET lease_owner = $1, lease_until = now() + make_interval(secs => $2::float8 / 1000)
        WHERE name = 'webhook' AND (lease_owner = $1 OR lease_until IS NULL OR lease_until < now())
       RETURNING tx::text, id::text, failures`,
      [owner, leaseMs],
    );
    return rows.length === 0 ? null : { cursor: { tx: rows[0].tx, id: rows[0].id }, failures: rows[0].failures };
  }

  /** Where the webhook's delivery stands (null before any process opened it). */
  async webhookMark(): Promise<(WebhookMark & { lastError: string | null }) | null> {
    const rows: Array<{ tx: string; id: string; failures: number; last_error: string | null }> = await this.db.query(
      `${EVENT_CLOCK} SELECT tx::text, id::text, failures, last_error FROM event_marks WHERE name = 'webhook'`,
    );
    return rows.length === 0
      ? null
      : { cursor: { tx: rows[0].tx, id: rows[0].id }, failures: rows[0].failures, lastError: rows[0].last_error };
  }

  /** A delivery acknowledged: the cursor moves past it, the failures are forgotten. False when the lease was lost. */
  async delivered(owner: string, through: EventCursor): Promise<boolean> {
    const [, n] = await this.db.query<[unknown, number]>(
      `${EVENT_CLOCK} UPDATE event_marks SET tx = $2::xid8, id = $3::bigint, failures = 0, last_error = NULL
        WHERE name = 'webhook' AND lease_owner = $1`,
      [owner, through.tx, through.id],
    );
    return n === 1;
  }

  /** A failed delivery, counted; answers the failures so far (null when the lease was lost). */
  async failed(owner: string, error: string): Promise<number | null> {
    const [rows] = await this.db.query<[Array<{ failures: number }>, number]>(
      `${EVENT_CLOCK} UPDATE event_marks SET failures = failures + 1, last_error = $2
        WHERE name = 'webhook' AND lease_owner = $1 RETURNING failures`,
      [owner, error.slice(0, 500)],
    );
    return rows.length === 0 ? null : rows[0].failures;
  }

  /**
   * Sets a batch aside as a dead letter and moves the cursor past it, in one transaction, so that it
   * is neither lost nor sent again. False when the lease was lost (nothing written).
   */
  async deadLetter(owner: string, events: StreamEvent[], attempts: number, error: string): Promise<boolean> {
    const last = events[events.length - 1].cursor.split('-');
    return this.db.transaction(async (m) => {
      const [, n] = await m.query<[unknown, number]>(
        `${EVENT_CLOCK} UPDATE event_marks SET tx = $2::xid8, id = $3::bigint, failures = 0, last_error = NULL
          WHERE name = 'webhook' AND lease_owner = $1`,
        [owner, last[0], last[1]],
      );
      if (n !== 1) return false;
      await m.query(
        `${EVENT_CLOCK} INSERT INTO webhook_dead_letters (first_cursor, last_cursor, events, attempts, last_error)
         VALUES ($1, $2, $3::jsonb, $4, $5)`,
        [events[0].cursor, events[events.length - 1].cursor, JSON.stringify(events), attempts, error.slice(0, 500)],
      );
      return true;
    });
  }

  /** Dead letters, newest first. */
  async deadLetters(limit: number): Promise<
    Array<{
      id: number;
      firstCursor: string;
      lastCursor: string;
      events: StreamEvent[];
      attempts: number;
      lastError: string;
      failedAt: string;
    }>
  > {
    const rows: Array<{
      id: string;
      first_cursor: string;
      last_cursor: string;
      events: StreamEvent[];
      attempts: number;
      last_error: string;
      failed_at: Date;
    }> = await this.db.query(
      `SELECT id::text, first_cursor, last_cursor, events, attempts, last_error, failed_at
         FROM webhook_dead_letters ORDER BY id DESC LIMIT $1`,
      [limit],
    );
    return rows.map((r) => ({
      id: Number(r.id),
      firstCursor: r.first_cursor,
      lastCursor: r.last_cursor,
      events: r.events,
      attempts: r.attempts,
      lastError: r.last_error,
      failedAt: r.failed_at.toISOString(),
    }));
  }
}
