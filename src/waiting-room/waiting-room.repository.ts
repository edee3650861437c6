// The SQL of the waiting room: the room's row (seeds, buckets sealed, positions handed out,
// admission cursor), the tickets (one row per user and product, with its bucket), the draws that
// place each sealed bucket, and the admission batches. The whole queue is here, so nothing a buyer
// was told depends on Redis. The SQL functions it calls (queue_join, queue_seal_ended, which calls
// queue_seal, and queue_places) are installed by migrations/1764500000000-QueueBuckets.ts (queue_join
// as it is now by migrations/1764550000000-QueueJoinMade.ts, queue_seal_ended by
// migrations/1764600000000-QueueSealEnded.ts), where they are written out in full.
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { AdmissionBatch, AdmissionView } from './ticket-status';

export type { AdmissionBatch, AdmissionView } from './ticket-status';

export interface RoomRow {
  productId: number;
  /** The pre-queue's seed (its SHA-256 is seedHash): secret until the pre-queue is drawn. */
  seed: Buffer;
  seedHash: string;
  /** Tickets in the drawn pre-queue; null until the draw. */
  preQueue: number | null;
  /** The width of the room's buckets, ms of PostgreSQL's clock. */
  bucketMs: number;
}

/** The user's ticket after a join: made now (created) or the one they had. */
export interface JoinedRow {
  ticketId: string;
  /** 0: the pre-queue; else the bucket of PostgreSQL's clock the join fell in (see queue_join). */
  bucket: number;
  /** Only for a ticket numbered on arrival before buckets; else its place comes from its bucket's draw. */
  position: number | null;
  created: boolean;
}

/** One bucket's draw: its tickets hold positions first .. first + tickets - 1. */
export interface Draw {
  bucket: number;
  /** The draw's index in the seeds' hash chains; null for a block numbered on arrival. */
  draw: number | null;
  first: number;
  tickets: number;
  seed: Buffer | null;
  drawnAt: number;
  /** The order drawn, as 8-byte lottery key prefixes; null until written (see drawOrder). */
  keys: Buffer | null;
}

/** What one seal did: buckets from .. through are sealed now, and these are their draws (the non-empty ones, and the pre-queue). */
export interface Seal {
  from: number;
  through: number;
  draws: Draw[];
}

/** A hash chain's public part: the head commits the seeds of draws firstDraw .. firstDraw + length - 1. */
export interface Chain {
  firstDraw: number;
  length: number;
  head: Buffer;
  madeAt: number;
}

/** A product with a waiting room whose sale has not long ended: the admitter's work list. */
export interface ActiveRoom {
  productId: number;
  startsAt: number | null;
  endsAt: number | null;
  admissionTtlS: number;
  bucketMs: number;
}

/** What an admission step is decided on, read under the room's row. */
export interface AdmissionState {
  unitsLeft: number;
  outstanding: number;
  /** Positions handed out: the step admits no further. */
  placed: number;
  admittedThrough: number;
}

interface RoomDbRow {
  product_id: number;
  seed: Buffer;
  seed_hash: string;
  pre_queue: number | null;
  bucket_ms: number;
}

const toRoom = (r: RoomDbRow): RoomRow => ({
  productId: r.product_id,
  seed: r.seed,
  seedHash: r.seed_hash,
  preQueue: r.pre_queue,
  bucketMs: r.bucket_ms,
});

/**
 * Marks the statements the waiting room runs on its clock (each process, every tick or second),
 * apart from any request: pg_stat_statements then tells them from what buyers' calls cost.
 */
export const CLOCK = '/* waiting-room clock */';

const ROOM_COLUMNS = 'product_id, seed, seed_hash, pre_queue, bucket_ms';

/**
 * The waiting room's "now" in SQL: the moment the statement began. Not now(), the transaction's
 * start: a step under the room's row (exclusively()) may have begun before another process's step
 * that took the row first (SKIP LOCKED) and committed, and would then be dated before it; every
 * statement under the row starts after the row was taken.
 */
const NOW = 'statement_timestamp()';

/**
 * An admission held by the room's pause: made before the pause, not expired at it. Its clock
 * stands still while the room is paused, and the pause's length is added to it when units come
 * back. The one place this rule is written (`b`: the batch, `w`: the room).
 */
const HELD = (b: string, w: string) =>
  `(${b}.admitted_at <= ${w}.paused_since AND ${b}.expires_at > ${w}.paused_since)`;

/**
 * Admissions not yet expired, or held by the pause, and how many of them an order has spent (the
 * orders_admission_spent index).
 */
const LIVE_ADMISSIONS = `
  live AS (SELECT b.first_position AS f, b.last_position AS l, b.admitted_at, b.expires_at,
                  COALESCE(${HELD('b', 'w')}, false) AS held
             FROM admission_batches b JOIN waiting_rooms w ON w.product_id = b.product_id
            WHERE b.product_id = $1 AND (b.expires_at > ${NOW} OR ${HELD('b', 'w')})),
  spent AS (SELECT count(*)::bigint AS n FROM orders o JOIN live ON o.admission_position BETWEEN live.f AND live.l
             WHERE o.product_id = $1)`;

/**
 * The advisory lock one process holds while it draws a bucket's order: the mark 'R', the product,
 * the bucket's low 24 bits (two buckets 19 days apart share a lock, which only makes one wait).
 */
const drawingLock = (productId: number, bucket: number) =>
  ((0x52n << 56n) | (BigInt(productId) << 24n) | BigInt(bucket % 0x1000000)).toString();

/** Units on sale: neither reserved nor sold. */
const UNITS_LEFT = `(SELECT COALESCE(sum(stock), 0) FROM stock_segments WHERE product_id = $1)::bigint`;

const OUTSTANDING = `(SELECT COALESCE(sum(l - f + 1), 0) FROM live)::bigint - (SELECT n FROM spent)`;

@Injectable()
export class WaitingRoomRepository {
  constructor(private readonly db: DataSource) {}

  async room(productId: number): Promise<RoomRow | null> {
    const rows: RoomDbRow[] = await this.db.query(`SELECT ${ROOM_COLUMNS} FROM waiting_rooms WHERE product_id = $1`, [
      productId,
    ]);
    return rows.length === 0 ? null : toRoom(rows[0]);
  }

  /** Products with a waiting room, whose sale ended less than a minute ago or not at all. */
  async activeRooms(): Promise<ActiveRoom[]> {
    const rows: Array<{
      id: number;
      starts_at: Date | null;
      ends_at: Date | null;
      admission_ttl_s: number;
      bucket_ms: number;
    }> = await this.db.query(
      `${CLOCK} SELECT p.id, p.starts_at, p.ends_at, p.admission_ttl_s, w.bucket_ms
         FROM products p JOIN waiting_rooms w ON w.product_id = p.id
        WHERE p.waiting_room AND (p.ends_at IS NULL OR p.ends_at > ${NOW} - interval '1 minute')`,
    );
    return rows.map((r) => ({
      productId: r.id,
      startsAt: r.starts_at?.getTime() ?? null,
      endsAt: r.ends_at?.getTime() ?? null,
      admissionTtlS: r.admission_ttl_s,
      bucketMs: r.bucket_ms,
    }));
  }

  /**
   * Runs `work` holding the room's row, or returns null at once when another process holds it (the
   * seals and the admission steps are made by one process at a time).
   */
  async exclusively<T>(productId: number, work: (q: Query) => Promise<T>): Promise<T | null> {
    return this.db.transaction(async (m) => {
      const rows: unknown[] = await m.query(
        `${CLOCK} SELECT 1 FROM waiting_rooms WHERE product_id = $1 FOR UPDATE SKIP LOCKED`,
        [productId],
      );
      if (rows.length === 0) return null;
      return work((sql, params) => m.query(sql, params));
    });
  }

  /**
   * A group of joins in one call (queue_join): each user's ticket, made now or the one they have,
   * in the order given; an empty list when the product has no room.
   */
  async join(productId: number, joins: ReadonlyArray<{ userId: string; ticketId: string }>): Promise<JoinedRow[]> {
    const rows: Array<{ ticket_id: string; bucket: string; position: string | null; created: boolean }> =
      await this.db.query(`SELECT ticket_id, bucket, position, created FROM queue_join($1, $2, $3)`, [
        productId,
        joins.map((j) => j.userId),
        joins.map((j) => j.ticketId),
      ]);
    return rows.map((r) => ({
      ticketId: r.ticket_id,
      bucket: Number(r.bucket),
      position: r.position === null ? null : Number(r.position),
      created: r.created,
    }));
  }

  /**
   * Seals every bucket that has ended (queue_seal_ended: one statement, committed when it answers),
   * so their tickets hold places; returns the buckets it sealed and the draws made, in bucket order.
   * Another process sealing at the same moment is waited for; then this one seals nothing. Given
   * `q` (inside exclusively()), it is part of that transaction.
   */
  async seal(productId: number, q: Query = (sql, params) => this.db.query(sql, params)): Promise<Seal> {
    const rows: Array<{
      bucket: string | null;
      draw: number;
      first_position: string;
      tickets: number;
      seed: Buffer;
      sealed_from: string;
      sealed_through: string;
    }> = (await q(
      `${CLOCK} SELECT bucket, draw, first_position, tickets, seed, sealed_from, sealed_through FROM queue_seal_ended($1)`,
      [productId],
    )) as never;
    const at = Date.now();
    if (rows.length === 0) return { from: 0, through: -1, draws: [] };
    return {
      from: Number(rows[0].sealed_from),
      through: Number(rows[0].sealed_through),
      draws: rows.flatMap((r) =>
        r.bucket === null
          ? []
          : [
              {
                bucket: Number(r.bucket),
                draw: r.draw,
                first: Number(r.first_position),
                tickets: r.tickets,
                seed: r.seed,
                drawnAt: at,
                keys: null,
              },
            ],
      ),
    };
  }

  /** The last bucket sealed (-1: none; a product without a room says -1 too). */
  async sealedThrough(productId: number): Promise<number> {
    const rows: Array<{ sealed_through: string }> = await this.db.query(
      `${CLOCK} SELECT sealed_through FROM waiting_rooms WHERE product_id = $1`,
      [productId],
    );
    return rows.length === 0 ? -1 : Number(rows[0].sealed_through);
  }

  /** The draws of buckets after `afterBucket`, in bucket order, with their drawn orders where written. */
  async draws(productId: number, afterBucket: number): Promise<Draw[]> {
    const rows: Array<{
      bucket: string;
      draw: number | null;
      first_position: string;
      tickets: number;
      seed: Buffer | null;
      drawn_at: Date;
      keys: Buffer | null;
    }> = await this.db.query(
      `${CLOCK} SELECT bucket, draw, first_position, tickets, seed, drawn_at, keys
         FROM queue_draws WHERE product_id = $1 AND bucket > $2 ORDER BY bucket`,
      [productId, afterBucket],
    );
    return rows.map((r) => ({
      bucket: Number(r.bucket),
      draw: r.draw,
      first: Number(r.first_position),
      tickets: r.tickets,
      seed: r.seed,
      drawnAt: r.drawn_at.getTime(),
      keys: r.keys,
    }));
  }

  /** A bucket's drawn order, once written (null before). */
  async drawnOrder(productId: number, bucket: number): Promise<Buffer | null> {
    const rows: Array<{ keys: Buffer | null }> = await this.db.query(
      `${CLOCK} SELECT keys FROM queue_draws WHERE product_id = $1 AND bucket = $2`,
      [productId, bucket],
    );
    return rows[0]?.keys ?? null;
  }

  /** The lottery ids of a bucket's tickets, in no order. */
  async bucketTickets(productId: number, bucket: number): Promise<string[]> {
    const rows: Array<{ ticket_id: string }> = await this.db.query(
      `${CLOCK} SELECT ticket_id FROM queue_tickets WHERE product_id = $1 AND bucket = $2`,
      [productId, bucket],
    );
    return rows.map((r) => r.ticket_id);
  }

  /**
   * Draws a bucket's order here, for every process to read: unless another process is drawing it
   * now (its transaction holds the bucket's drawing lock; null then, ask again) or has written it
   * (that order). `order` turns the bucket's ticket ids into its drawn order. One process draws each
   * bucket, whichever asks first; a process that dies drawing lets the lock go with its session.
   */
  async drawOrderOnce(
    productId: number,
    bucket: number,
    order: (ticketIds: string[]) => Buffer,
  ): Promise<Buffer | null> {
    return this.db.transaction(async (m) => {
      const [lock]: Array<{ ok: boolean }> = await m.query(
        `${CLOCK} SELECT pg_try_advisory_xact_lock($1::bigint) AS ok`,
        [drawingLock(productId, bucket)],
      );
      if (!lock.ok) return null;
      const [row]: Array<{ keys: Buffer | null }> = await m.query(
        `${CLOCK} SELECT keys FROM queue_draws WHERE product_id = $1 AND bucket = $2`,
        [productId, bucket],
      );
      if (row?.keys) return row.keys;
      const ids: Array<{ ticket_id: string }> = await m.query(
        `${CLOCK} SELECT ticket_id FROM queue_tickets WHERE product_id = $1 AND bucket = $2`,
        [productId, bucket],
      );
      const keys = order(ids.map((r) => r.ticket_id));
      await m.query(`${CLOCK} UPDATE queue_draws SET keys = $3 WHERE product_id = $1 AND bucket = $2`, [
        productId,
        bucket,
        keys,
      ]);
      return keys;
    });
  }

  /** The hash chains that commit a room's seeds, without their secret elements. */
  async chains(productId: number): Promise<Chain[]> {
    const rows: Array<{ first_draw: number; length: number; head: Buffer; made_at: Date }> = await this.db.query(
      `SELECT first_draw, length, head, made_at FROM queue_chains WHERE product_id = $1 ORDER BY first_draw`,
      [productId],
    );
    return rows.map((r) => ({ firstDraw: r.first_draw, length: r.length, head: r.head, madeAt: r.made_at.getTime() }));
  }

  /**
   * Inside exclusively(): what the next admission step is decided on, read under the room's row
   * (whatever the caller's view said).
   */
  async admissionState(q: Query, productId: number): Promise<AdmissionState> {
    const [now] = (await q(
      `${CLOCK} WITH ${LIVE_ADMISSIONS}
       SELECT ${UNITS_LEFT} AS units_left, w.high_water, w.admitted_through, ${OUTSTANDING} AS outstanding
         FROM waiting_rooms w WHERE w.product_id = $1`,
      [productId],
    )) as Array<{ units_left: string; outstanding: string; high_water: string; admitted_through: string }>;
    return {
      unitsLeft: Number(now.units_left),
      outstanding: Number(now.outstanding),
      placed: Number(now.high_water),
      admittedThrough: Number(now.admitted_through),
    };
  }

  /**
   * Inside exclusively(): admits the `count` positions after the cursor, for `ttlS` seconds, and
   * records what the step was decided on.
   */
  async admit(
    q: Query,
    productId: number,
    state: AdmissionState,
    count: number,
    ttlS: number,
  ): Promise<AdmissionBatch> {
    const first = state.admittedThrough + 1;
    const last = state.admittedThrough + count;
    const [made] = (await q(
      `${CLOCK} INSERT INTO admission_batches (product_id, first_position, last_position, admitted_at, expires_at, units_left, outstanding_before)
       VALUES ($1, $2, $3, ${NOW}, ${NOW} + make_interval(secs => $4), $5, $6) RETURNING admitted_at, expires_at`,
      [productId, first, last, ttlS, state.unitsLeft, state.outstanding],
    )) as Array<{ admitted_at: Date; expires_at: Date }>;
    await q(`${CLOCK} UPDATE waiting_rooms SET admitted_through = $2 WHERE product_id = $1`, [productId, last]);
    return { first, last, admittedAt: made.admitted_at.getTime(), expiresAt: made.expires_at.getTime(), held: false };
  }

  /**
   * Inside exclusively(): pauses the admissions' clocks when no unit is left (true when it did).
   * Checked again here, under the room's row, whatever the caller's view said.
   */
  async pause(q: Query, productId: number): Promise<boolean> {
    const rows = await q(
      `${CLOCK} UPDATE waiting_rooms SET paused_since = ${NOW}
        WHERE product_id = $1 AND paused_since IS NULL AND ${UNITS_LEFT} = 0 RETURNING 1`,
      [productId],
    );
    return rows.length > 0;
  }

  /**
   * Inside exclusively(): once units are back on sale, every admission held by the pause gets the
   * pause's length added to its expiry, and the room's clock runs again (true when it did). The
   * batches' update is a data-modifying CTE: PostgreSQL runs it whether or not the rest reads it.
   */
  async resume(q: Query, productId: number): Promise<boolean> {
    const rows = await q(
      `${CLOCK} WITH w AS (SELECT paused_since FROM waiting_rooms
                            WHERE product_id = $1 AND paused_since IS NOT NULL AND ${UNITS_LEFT} > 0),
            pushed AS (UPDATE admission_batches b SET expires_at = b.expires_at + (${NOW} - w.paused_since)
                         FROM w WHERE b.product_id = $1 AND ${HELD('b', 'w')} RETURNING 1)
       UPDATE waiting_rooms r SET paused_since = NULL FROM w
        WHERE r.product_id = $1 RETURNING 1`,
      [productId],
    );
    return rows.length > 0;
  }

  /** The room as polls read it; null when the product has no room. */
  async view(productId: number): Promise<AdmissionView | null> {
    const rows: ViewRow[] = await this.db.query(
      `${CLOCK} WITH ${LIVE_ADMISSIONS},
       opened AS (SELECT admitted_at AS at FROM admission_batches WHERE product_id = $1 ORDER BY first_position LIMIT 1),
       recent AS (SELECT COALESCE(sum(last_position - first_position + 1), 0)::bigint AS n,
                         extract(epoch FROM ${NOW} - GREATEST((SELECT at FROM opened), ${NOW} - interval '30 seconds')) AS span
                    FROM admission_batches
                   WHERE product_id = $1 AND admitted_at > ${NOW} - interval '30 seconds' AND first_position > 1)
       SELECT w.pre_queue,
              (SELECT sum(c.pre_joined) FROM queue_counts c WHERE c.product_id = $1) AS pre_joined,
              w.high_water, w.admitted_through, w.sealed_through,
              EXISTS (SELECT 1 FROM queue_tickets t WHERE t.product_id = $1 AND t.bucket > w.sealed_through) AS unsealed,
              ${UNITS_LEFT} AS units_left,
              ${OUTSTANDING} AS outstanding,
              (SELECT COALESCE(json_agg(json_build_array(f, l, (extract(epoch FROM admitted_at) * 1000)::bigint,
                                                         (extract(epoch FROM expires_at) * 1000)::bigint, held) ORDER BY f), '[]')
                 FROM live) AS live,
              (SELECT n FROM recent) AS recent, (SELECT span FROM recent) AS span,
              (extract(epoch FROM w.paused_since) * 1000)::bigint AS paused_since,
              (extract(epoch FROM ${NOW}) * 1000)::bigint AS at
         FROM waiting_rooms w WHERE w.product_id = $1`,
      [productId],
    );
    if (rows.length === 0) return null;
    const r = rows[0];
    // The rate of the admissions that follow the opening one: that first batch (from place 1) hands
    // out what the stock allows at once, and counted in, it made the first estimates of a sale fed
    // by returns far too short (the real wait was about ten times longer at the median). Over the
    // last 30 s, or since the opening when that is shorter (at least 1 s), not since the first batch
    // in the window: a burst just admitted is not a pace.
    const span = Math.min(30, Math.max(1, Number(r.span ?? 0)));
    const preJoined = Number(r.pre_joined ?? 0);
    return {
      preQueue: r.pre_queue,
      preJoined: r.pre_queue ?? preJoined,
      highWater: Number(r.high_water),
      sealedThrough: Number(r.sealed_through),
      unsealed: r.unsealed,
      admittedThrough: Number(r.admitted_through),
      outstanding: Number(r.outstanding),
      unitsLeft: Number(r.units_left),
      live: r.live.map(([first, last, admittedAt, expiresAt, held]) => ({ first, last, admittedAt, expiresAt, held })),
      ratePerS: Number(r.recent) / span,
      pausedSince: r.paused_since === null ? null : Number(r.paused_since),
      at: Number(r.at),
    };
  }
}

interface ViewRow {
  pre_queue: number | null;
  pre_joined: string | null;
  high_water: string;
  admitted_through: string;
  sealed_through: string;
  unsealed: boolean;
  units_left: string;
  outstanding: string;
  live: Array<[number, number, number, number, boolean]>;
  recent: string;
  span: number | null;
  paused_since: string | null;
  at: string;
}

export type Query = (sql: string, params: unknown[]) => Promise<unknown[]>;
