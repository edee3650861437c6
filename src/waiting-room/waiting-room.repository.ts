// The SQL of the waiting room: the room's row (seed, draw, positions handed out, admission cursor),
// the tickets (one row per user and product, with its place) and the admission batches. The whole
// queue is here, so nothing a buyer was told depends on Redis.
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { AdmissionBatch, AdmissionView, admissionsDue } from './ticket-status';

export type { AdmissionBatch, AdmissionView } from './ticket-status';

export interface RoomRow {
  productId: number;
  seed: Buffer;
  seedHash: string;
  /** Tickets in the drawn pre-queue; null until the draw. */
  preQueue: number | null;
  /** Positions handed out: the drawn pre-queue and the arrivals after it. */
  highWater: number;
  admittedThrough: number;
}

/** A join as one process sends it in a group (see GroupedCalls). */
export interface JoinInput {
  userId: string;
  ticketId: string;
  /**
   * HMAC-SHA256(seed, ticketId): the ticket's lottery key, used if it joins the pre-queue. Null in
   * a group of arrivals: queue_join() draws before it places an arrival, so no arrival ever joins
   * the pre-queue.
   */
  lotteryKey: Buffer | null;
}

/** The user's ticket after a join: made now (created) or the one they had. */
export interface JoinedRow {
  ticketId: string;
  /** Null for a pre-queue ticket until the draw. */
  position: number | null;
  created: boolean;
}

/** A product with a waiting room whose sale has not long ended: the admitter's work list. */
export interface ActiveRoom {
  productId: number;
  startsAt: number | null;
  endsAt: number | null;
  admissionTtlS: number;
}

/** One admission step's result: the batch made (null when none was due) and what it was decided on. */
export interface AdmissionStep {
  batch: AdmissionBatch | null;
  unitsLeft: number;
  outstandingBefore: number;
}

interface RoomDbRow {
  product_id: number;
  seed: Buffer;
  seed_hash: string;
  pre_queue: number | null;
  high_water: string;
  admitted_through: string;
}

const toRoom = (r: RoomDbRow): RoomRow => ({
  productId: r.product_id,
  seed: r.seed,
  seedHash: r.seed_hash,
  preQueue: r.pre_queue,
  highWater: Number(r.high_water),
  admittedThrough: Number(r.admitted_through),
});

/**
 * Marks the statements the waiting room runs on its clock (each process, every tick or second),
 * apart from any request: pg_stat_statements then tells them from what buyers' calls cost.
 */
export const CLOCK = '/* waiting-room clock */';

const ROOM_COLUMNS = 'product_id, seed, seed_hash, pre_queue, high_water, admitted_through';

/**
 * Admissions not yet expired, and how many of them an order has spent (the orders_admission_spent
 * index). While the room is paused (no unit left), an admission made before the pause and live at
 * it stays live (the same rule as standingOf's and resume's).
 */
const LIVE_ADMISSIONS = `
  live AS (SELECT b.first_position AS f, b.last_position AS l, b.admitted_at, b.expires_at
             FROM admission_batches b JOIN waiting_rooms w ON w.product_id = b.product_id
            WHERE b.product_id = $1
              AND (b.expires_at > now() OR (b.expires_at > w.paused_since AND b.admitted_at <= w.paused_since))),
  spent AS (SELECT count(*)::bigint AS n FROM orders o JOIN live ON o.admission_position BETWEEN live.f AND live.l
             WHERE o.product_id = $1)`;

/** Units on sale: neither reserved nor sold. */
const UNITS_LEFT = `(SELECT COALESCE(sum(stock), 0) FROM stock_segments WHERE product_id = $1)::bigint`;

/** Positions handed out so far (the drawn pre-queue and the arrivals after it), exact. */
const HANDED_OUT = `COALESCE((SELECT COALESCE(c.pre_queue, 0) + c.arrivals FROM queue_counts c WHERE c.product_id = $1), 0)`;

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
    const rows: Array<{ id: number; starts_at: Date | null; ends_at: Date | null; admission_ttl_s: number }> =
      await this.db.query(
        `${CLOCK} SELECT p.id, p.starts_at, p.ends_at, p.admission_ttl_s
           FROM products p JOIN waiting_rooms w ON w.product_id = p.id
          WHERE p.waiting_room AND (p.ends_at IS NULL OR p.ends_at > now() - interval '1 minute')`,
      );
    return rows.map((r) => ({
      productId: r.id,
      startsAt: r.starts_at?.getTime() ?? null,
      endsAt: r.ends_at?.getTime() ?? null,
      admissionTtlS: r.admission_ttl_s,
    }));
  }

  /**
   * Runs `work` holding the room's row, or returns null at once when another process holds it (the
   * draw and the admission steps are made by one process at a time).
   */
  async exclusively<T>(productId: number, work: (room: RoomRow, q: Query) => Promise<T>): Promise<T | null> {
    return this.db.transaction(async (m) => {
      const rows: RoomDbRow[] = await m.query(
        `${CLOCK} SELECT ${ROOM_COLUMNS} FROM waiting_rooms WHERE product_id = $1 FOR UPDATE SKIP LOCKED`,
        [productId],
      );
      if (rows.length === 0) return null;
      return work(toRoom(rows[0]), (sql, params) => m.query(sql, params));
    });
  }

  /**
   * A group of joins in one call (queue_join, see its migration): each user's ticket, made now or
   * the one they have, in the order given; an empty list when the product has no room.
   */
  async join(productId: number, arrival: boolean, joins: readonly JoinInput[]): Promise<JoinedRow[]> {
    const rows: Array<{ user_id: string; ticket_id: string; position: string | null; created: boolean }> =
      await this.db.query(`SELECT user_id, ticket_id, position, created FROM queue_join($1, $2, $3, $4, $5)`, [
        productId,
        arrival,
        joins.map((j) => j.userId),
        joins.map((j) => j.ticketId),
        joins.map((j) => j.lotteryKey),
      ]);
    return rows.map((r) => ({
      ticketId: r.ticket_id,
      position: r.position === null ? null : Number(r.position),
      created: r.created,
    }));
  }

  /**
   * The draw, inside exclusively() (queue_draw, see its migration; a join may have made it already):
   * every pre-queue ticket's place is its rank by lottery key, ties by ticket id. The room's row
   * then records it, and the seed is published. Returns the pre-queue's size.
   */
  async draw(q: Query, productId: number): Promise<number> {
    const [drawn] = (await q(`${CLOCK} SELECT queue_draw($1) AS n`, [productId])) as Array<{ n: number }>;
    await q(
      `UPDATE waiting_rooms SET pre_queue = $2::int, drawn_at = COALESCE(drawn_at, now()),
              high_water = GREATEST(high_water, $2::bigint)
        WHERE product_id = $1`,
      [productId, drawn.n],
    );
    return drawn.n;
  }

  /**
   * The drawn pre-queue's lottery keys, first 8 bytes each, in draw order, as one buffer: with it a
   * process places any pre-queue ticket by a binary search, with no statement per ticket.
   */
  async drawnKeys(productId: number): Promise<Buffer> {
    const rows: Array<{ keys: Buffer | null }> = await this.db.query(
      `${CLOCK} SELECT string_agg(substring(lottery_key FROM 1 FOR 8), ''::bytea ORDER BY position) AS keys
         FROM queue_tickets WHERE product_id = $1 AND kind = 'p'`,
      [productId],
    );
    return rows[0]?.keys ?? Buffer.alloc(0);
  }

  /** A ticket's position as PostgreSQL has it (null before the draw, or no such ticket). */
  async position(productId: number, userId: string): Promise<number | null> {
    const rows: Array<{ position: string | null }> = await this.db.query(
      `SELECT position FROM queue_tickets WHERE product_id = $1 AND user_id = $2`,
      [productId, userId],
    );
    return rows[0]?.position == null ? null : Number(rows[0].position);
  }

  /**
   * One admission step, inside exclusively(): admits the next tickets up to `taken` (positions
   * handed out so far) while the admissions outstanding stay below ceil(ratio x units left).
   */
  async admit(q: Query, room: RoomRow, ratio: number, ttlS: number): Promise<AdmissionStep> {
    const [now] = (await q(
      `${CLOCK} WITH ${LIVE_ADMISSIONS}
       SELECT ${UNITS_LEFT} AS units_left,
              ${HANDED_OUT} AS taken,
              (SELECT COALESCE(sum(l - f + 1), 0) FROM live)::bigint - (SELECT n FROM spent) AS outstanding`,
      [room.productId],
    )) as Array<{ units_left: string; outstanding: string; taken: string }>;
    const taken = Number(now.taken);
    const unitsLeft = Number(now.units_left);
    const outstanding = Number(now.outstanding);
    const n = Math.min(admissionsDue(ratio, unitsLeft, outstanding), taken - room.admittedThrough);
    if (taken > room.highWater)
      await q(`${CLOCK} UPDATE waiting_rooms SET high_water = $2 WHERE product_id = $1`, [room.productId, taken]);
    if (n <= 0) return { batch: null, unitsLeft, outstandingBefore: outstanding };
    const first = room.admittedThrough + 1;
    const last = room.admittedThrough + n;
    const [made] = (await q(
      `${CLOCK} INSERT INTO admission_batches (product_id, first_position, last_position, admitted_at, expires_at, units_left, outstanding_before)
       VALUES ($1, $2, $3, now(), now() + make_interval(secs => $4), $5, $6) RETURNING admitted_at, expires_at`,
      [room.productId, first, last, ttlS, unitsLeft, outstanding],
    )) as Array<{ admitted_at: Date; expires_at: Date }>;
    await q(`${CLOCK} UPDATE waiting_rooms SET admitted_through = $2 WHERE product_id = $1`, [room.productId, last]);
    return {
      batch: { first, last, admittedAt: made.admitted_at.getTime(), expiresAt: made.expires_at.getTime() },
      unitsLeft,
      outstandingBefore: outstanding,
    };
  }

  /**
   * Inside exclusively(): pauses the admissions' clocks when no unit is left (true when it did).
   * Checked again here, under the room's row, whatever the caller's view said.
   */
  async pause(q: Query, productId: number): Promise<boolean> {
    const rows = await q(
      `${CLOCK} UPDATE waiting_rooms SET paused_since = now()
        WHERE product_id = $1 AND paused_since IS NULL AND ${UNITS_LEFT} = 0 RETURNING 1`,
      [productId],
    );
    return rows.length > 0;
  }

  /**
   * Inside exclusively(): once units are back on sale, every admission live at the pause (not one
   * made since, when units came back before this step) gets the pause's length added to its
   * expiry, and the room's clock runs again (true when it did). The batches' update is a
   * data-modifying CTE: PostgreSQL runs it whether or not the rest reads it.
   */
  async resume(q: Query, productId: number): Promise<boolean> {
    const rows = await q(
      `${CLOCK} WITH r AS (SELECT paused_since FROM waiting_rooms
                            WHERE product_id = $1 AND paused_since IS NOT NULL AND ${UNITS_LEFT} > 0),
            pushed AS (UPDATE admission_batches b SET expires_at = b.expires_at + (now() - r.paused_since)
                         FROM r WHERE b.product_id = $1 AND b.expires_at > r.paused_since
                                  AND b.admitted_at <= r.paused_since RETURNING 1)
       UPDATE waiting_rooms w SET paused_since = NULL FROM r
        WHERE w.product_id = $1 RETURNING 1`,
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
                         extract(epoch FROM now() - GREATEST((SELECT at FROM opened), now() - interval '30 seconds')) AS span
                    FROM admission_batches
                   WHERE product_id = $1 AND admitted_at > now() - interval '30 seconds' AND first_position > 1)
       SELECT (SELECT c.pre_queue FROM queue_counts c WHERE c.product_id = $1) AS pre_queue,
              (SELECT c.pre_joined FROM queue_counts c WHERE c.product_id = $1) AS pre_joined,
              ${HANDED_OUT} AS high_water, w.admitted_through,
              ${UNITS_LEFT} AS units_left,
              (SELECT COALESCE(sum(l - f + 1), 0) FROM live)::bigint - (SELECT n FROM spent) AS outstanding,
              (SELECT COALESCE(json_agg(json_build_array(f, l, (extract(epoch FROM admitted_at) * 1000)::bigint,
                                                         (extract(epoch FROM expires_at) * 1000)::bigint) ORDER BY f), '[]')
                 FROM live) AS live,
              (SELECT n FROM recent) AS recent, (SELECT span FROM recent) AS span,
              (extract(epoch FROM w.paused_since) * 1000)::bigint AS paused_since,
              (extract(epoch FROM now()) * 1000)::bigint AS at
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
    return {
      preQueue: r.pre_queue,
      preJoined: Number(r.pre_joined ?? 0),
      highWater: Number(r.high_water),
      admittedThrough: Number(r.admitted_through),
      outstanding: Number(r.outstanding),
      unitsLeft: Number(r.units_left),
      live: r.live.map(([first, last, admittedAt, expiresAt]) => ({ first, last, admittedAt, expiresAt })),
      ratePerS: Number(r.recent) / span,
      pausedSince: r.paused_since === null ? null : Number(r.paused_since),
      at: Number(r.at),
    };
  }

  /** Every admission batch of a product, in position order (the admission log). */
  async batches(productId: number): Promise<Array<AdmissionBatch & { unitsLeft: number; outstandingBefore: number }>> {
    const rows: Array<{
      first_position: string;
      last_position: string;
      admitted_at: Date;
      expires_at: Date;
      units_left: number;
      outstanding_before: number;
    }> = await this.db.query(
      `SELECT first_position, last_position, admitted_at, expires_at, units_left, outstanding_before
         FROM admission_batches WHERE product_id = $1 ORDER BY first_position`,
      [productId],
    );
    return rows.map((r) => ({
      first: Number(r.first_position),
      last: Number(r.last_position),
      admittedAt: r.admitted_at.getTime(),
      expiresAt: r.expires_at.getTime(),
      unitsLeft: r.units_left,
      outstandingBefore: r.outstanding_before,
    }));
  }
}

interface ViewRow {
  pre_queue: number | null;
  pre_joined: string | null;
  high_water: string;
  admitted_through: string;
  units_left: string;
  outstanding: string;
  live: Array<[number, number, number, number]>;
  recent: string;
  span: number | null;
  paused_since: string | null;
  at: string;
}

export type Query = (sql: string, params: unknown[]) => Promise<unknown[]>;
