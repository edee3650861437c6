// Every SQL statement of an order: selling from one segment or several (deduct and insert in one
// transaction), reading an order by id or by its key (product, user), and settling a write whose
// reply was lost. Every deduction is conditional (`stock >= q`) and the schema has
// CHECK (stock >= 0), so no path can oversell even if a Redis lock was lost.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Injectable } from '@nestjs/common';
import { DataSource, QueryRunner } from 'typeorm';
import { DatabaseConfig, HttpConfig } from '../config/app-config';
import { mapDatabaseError, sqlState, writeFailure } from '../common/database-errors';
import {
  AlreadyOrderedError,
  BusyError,
  DomainError,
  OrderCancelledError,
  OrderExpiredError,
  OrderNotFoundError,
  OrderPaidError,
  OutcomeUnknownError,
  UnavailableError,
} from '../common/domain-errors';
import { takeFrom } from '../inventory/segment-plan';
import { MetricsService } from '../metrics/metrics.service';

export interface Allocation {
  segment: number;
  quantity: number;
}

export type OrderStatus = 'reserved' | 'paid' | 'cancelled' | 'expired';

export interface OrderRow {
  id: number;
  productId: number;
  userId: string;
  quantity: number;
  allocations: Allocation[];
  status: OrderStatus;
  createdAt: Date;
  expiresAt: Date;
  /** Set once paid. */
  paidAt?: Date;
  /** Set once cancelled or expired. */
  closedAt?: Date;
}

/** One order of a batch: what it asks for. */
export interface BatchEntry {
  userId: string;
  quantity: number;
}

/** The answer for one entry of a batch: sold, refused (the user holds an order), or did not fit. */
export type BatchResult = { kind: 'sold'; order: OrderRow } | { kind: 'alreadyOrdered' } | { kind: 'short' };

export interface BatchAttempt {
  /** One per entry, in the entries' order. */
  results: BatchResult[];
  /** Units left in the segment afterwards; null when the segment no longer exists. */
  remaining: number | null;
}

/** A batch whose statement lost its reply: one UncertainWrite per entry, to settle each on its own. */
export class UncertainBatch extends Error {
  constructor(readonly writes: UncertainWrite[]) {
    super('the outcome of a batch of order writes is unknown');
  }
}

/**
 * One sale from one segment: sold (the segment held enough), or short (it did not; nothing was
 * written). Either way, the units left in the segment afterwards; null when the segment no longer
 * exists (or is unknown).
 */
export type SegmentAttempt = { kind: 'sold'; order: OrderRow; remaining: number | null } | { kind: 'short'; remaining: number | null };

/**
 * A sale whose write reached PostgreSQL and then lost its reply: it may have committed. Carries
 * what settle() needs to find out. Internal: settle() turns it into an answer that is the truth.
 */
export class UncertainWrite extends Error {
  constructor(
    readonly productId: number,
    readonly userId: string,
    readonly quantity: number,
    /** The segments the write took from (or would have). */
    readonly segments: number[],
    /** Written at the head of every statement of the attempt, to find it in pg_stat_activity. */
    readonly tag: string,
    /** process.hrtime of just before the write was sent. */
    readonly sentAt: bigint,
    override readonly cause: unknown,
  ) {
    super('the outcome of an order write is unknown');
  }
}

/** When a reservation made now runs out: the product's payment timeout, read in the same statement. */
const EXPIRES_AT = (productParam: string) => `now() + make_interval(secs => (SELECT payment_timeout_s FROM products WHERE id = ${productParam}))`;

/** Orders that count against one order per user and product (the partial unique index's predicate). */
const LIVE = `status IN ('reserved', 'paid')`;

// One statement is one transaction: deduct from the segment if it holds q, insert the reserved
// order from the deducted row, and always report what the segment has left.
const SELL_FROM_SEGMENT_SQL = `
  WITH seg AS (
    UPDATE stock_segments SET stock = stock - $3::int
     WHERE product_id = $1 AND idx = $2 AND stock >= $3::int
    RETURNING idx, stock
  ), ins AS (
    INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at)
    SELECT $1, $4, $3::int, jsonb_build_array(jsonb_build_object('segment', seg.idx, 'quantity', $3::int)), 'reserved', ${EXPIRES_AT('$1')} FROM seg
    RETURNING id, created_at, expires_at
  )
  SELECT ins.id, ins.created_at, ins.expires_at,
         COALESCE((SELECT stock FROM seg),
                  (SELECT stock FROM stock_segments WHERE product_id = $1 AND idx = $2)) AS remaining
    FROM (SELECT 1) AS one LEFT JOIN ins ON true`;

// Group commit: several orders from one segment in one statement. The segment row is locked
// first; the orders that fit (smallest quantities first, then in arrival order) are inserted,
// skipping users who already hold a live order (also one inserted concurrently: ON CONFLICT), and the
// segment is deducted by exactly what was inserted; CHECK (stock >= 0) still refuses any deduction
// past zero. Rows: one per sold order, one per user found holding an order ('held'), one per
// order chosen to fit ('chosen'), and one 'left' with the segment's stock afterwards (null when
// the segment no longer exists).
export const SELL_BATCH_SQL = `
  WITH req AS (
    SELECT r.user_id, r.quantity, r.ord
      FROM unnest($3::varchar[], $4::int[]) WITH ORDINALITY AS r(user_id, quantity, ord)
  ), seg AS (
    SELECT stock FROM stock_segments WHERE product_id = $1 AND idx = $2 FOR UPDATE
  ), fresh AS (
    -- a LATERAL ... LIMIT 1 is looked up per user through the partial unique index whatever the
    -- planner believes; as NOT EXISTS (an anti-join) on a table without statistics yet (a new
    -- sale's first minutes) it scanned all of the product's orders once per user
    SELECT req.* FROM req
      LEFT JOIN LATERAL (SELECT true AS held FROM orders o WHERE o.product_id = $1 AND o.user_id = req.user_id AND o.${LIVE} LIMIT 1) h ON true
     WHERE h.held IS NULL
  ), chosen AS (
    SELECT f.user_id, f.quantity, f.ord
      FROM (SELECT fresh.*, sum(fresh.quantity) OVER (ORDER BY fresh.quantity, fresh.ord) AS running FROM fresh) f, seg
     WHERE f.running <= seg.stock
  ), ins AS (
    INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at)
    SELECT $1, c.user_id, c.quantity, jsonb_build_array(jsonb_build_object('segment', $2::int, 'quantity', c.quantity)), 'reserved', ${EXPIRES_AT('$1')}
      -- one global order of insertion: two batches that meet on the one-order-per-user key (no user
      -- lock while its Redis is down) wait for each other in the same order, never in a cycle
      FROM chosen c ORDER BY c.user_id
    ON CONFLICT (product_id, user_id) WHERE ${LIVE} DO NOTHING
    RETURNING id, user_id, quantity, created_at, expires_at
  ), upd AS (
    UPDATE stock_segments SET stock = stock - (SELECT sum(quantity) FROM ins)
     WHERE product_id = $1 AND idx = $2 AND EXISTS (SELECT 1 FROM ins)
    RETURNING stock
  )
  SELECT 'sold' AS kind, user_id, id, created_at, expires_at, NULL::bigint AS stock FROM ins
  UNION ALL
  SELECT 'held', user_id, NULL, NULL, NULL, NULL FROM req WHERE NOT EXISTS (SELECT 1 FROM fresh WHERE fresh.ord = req.ord)
  UNION ALL
  SELECT 'chosen', user_id, NULL, NULL, NULL, NULL FROM chosen
  UNION ALL
  SELECT 'left', NULL, NULL, NULL, NULL, COALESCE((SELECT stock FROM upd), (SELECT stock FROM seg))`;

const INSERT_ORDER_SQL = `
  INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at) VALUES ($1, $2, $3, $4::jsonb, 'reserved', ${EXPIRES_AT('$1')})
  RETURNING id, created_at, expires_at`;

/**
 * What TypeORM's query() answers for an UPDATE (or DELETE), RETURNING or not: the rows returned and
 * the number of rows affected, not the rows alone as for a SELECT or an INSERT.
 */
type Updated<T> = [T[], number];

const ORDER_COLUMNS = 'id, product_id, user_id, quantity, allocations, status, created_at, expires_at, paid_at, closed_at';

/** An order as it comes back from a read, with its age by PostgreSQL's own clock. */
interface OrderRecord {
  id: string;
  product_id: number;
  user_id: string;
  quantity: number;
  allocations: Allocation[];
  status: OrderStatus;
  created_at: Date;
  expires_at: Date;
  paid_at: Date | null;
  closed_at: Date | null;
  age_ms?: number;
}

const toRow = (r: OrderRecord): OrderRow => ({
  id: Number(r.id),
  productId: r.product_id,
  userId: r.user_id,
  quantity: r.quantity,
  allocations: r.allocations,
  status: r.status,
  createdAt: r.created_at,
  expiresAt: r.expires_at,
  ...(r.paid_at ? { paidAt: r.paid_at } : {}),
  ...(r.closed_at ? { closedAt: r.closed_at } : {}),
});

/** A new reserved order as a sale statement returns it. */
const reserved = (id: string, productId: number, userId: string, quantity: number, allocations: Allocation[], createdAt: Date, expiresAt: Date): OrderRow => ({
  id: Number(id),
  productId,
  userId,
  quantity,
  allocations,
  status: 'reserved',
  createdAt,
  expiresAt,
});

/** Units that went back on sale: where, so that the hints hiding them can be cleared. */
export interface ReturnedUnits {
  productId: number;
  layoutVersion: number;
  segments: number[];
  units: number;
}

/** What one sweep of a product expired. */
export interface Expired {
  orders: number;
  returned: ReturnedUnits | null;
  /** For each expired order, how long after its expiresAt it was expired (ms, PostgreSQL's clock). */
  lagsMs: number[];
}

/** A pay or cancel whose write lost its reply: what settleChange() needs to find out. */
class UncertainChange extends Error {
  constructor(
    readonly tag: string,
    override readonly cause: unknown,
  ) {
    super('the outcome of an order change is unknown');
  }
}

const TRANSITION_UNKNOWN = 'the database failed while the order was being changed; whether the change took effect is unknown: retry the same call to learn it';

/** SQLSTATE of a CHECK constraint refusal. */
const CHECK_VIOLATION = '23514';

/** Pause between lookups while PostgreSQL is coming back. */
const SETTLE_RETRY_MS = 100;

@Injectable()
export class OrdersRepository {
  constructor(
    private readonly db: DataSource,
    private readonly database: DatabaseConfig,
    private readonly http: HttpConfig,
    private readonly metrics: MetricsService,
  ) {}

  /**
   * Sells q units from one segment with the order insert, atomically. `holdInTxMs` > 0 keeps the
   * row locked that long inside the transaction (the no-Redis-lock peer of the benchmark).
   * Throws UncertainWrite when PostgreSQL may have committed without telling.
   */
  async sellFromSegment(productId: number, idx: number, q: number, userId: string, holdInTxMs = 0): Promise<SegmentAttempt> {
    const order = (id: string, createdAt: Date, expiresAt: Date) => reserved(id, productId, userId, q, [{ segment: idx, quantity: q }], createdAt, expiresAt);
    const tag = randomUUID();
    const sentAt = process.hrtime.bigint();
    const uncertain = (err: unknown) => new UncertainWrite(productId, userId, q, [idx], tag, sentAt, err);
    if (holdInTxMs === 0) {
      try {
        const [row] = await this.db.query<Array<{ id: string | null; created_at: Date | null; expires_at: Date | null; remaining: string | null }>>(
          tagged(tag, SELL_FROM_SEGMENT_SQL),
          [productId, idx, q, userId],
        );
        const remaining = row.remaining === null ? null : Number(row.remaining);
        return row.id === null
          ? { kind: 'short', remaining }
          : { kind: 'sold', order: order(row.id, row.created_at as Date, row.expires_at as Date), remaining };
      } catch (err) {
        throw writeFailure(err) === 'unknown' ? uncertain(err) : this.mapped(err);
      }
    }
    return this.inTransaction(tag, uncertain, async (tx) => {
      const updated = (await tx.query(
        tagged(tag, 'UPDATE stock_segments SET stock = stock - $3::int WHERE product_id = $1 AND idx = $2 AND stock >= $3::int RETURNING stock'),
        [productId, idx, q],
      )) as [Array<{ stock: string }>, number];
      if (updated[1] === 0) {
        const [seg] = (await tx.query('SELECT stock FROM stock_segments WHERE product_id = $1 AND idx = $2', [productId, idx])) as Array<{ stock: string }>;
        return { kind: 'short' as const, remaining: seg ? Number(seg.stock) : null };
      }
      await sleep(holdInTxMs);
      const [ins] = await this.insertOrder(tx, tag, productId, userId, q, [{ segment: idx, quantity: q }]);
      return { kind: 'sold' as const, order: order(ins.id, ins.created_at, ins.expires_at), remaining: Number(updated[0][0].stock) };
    });
  }

  /**
   * Sells as many of the entries as the segment holds, in one statement (group commit). An entry
   * whose user already holds an order is answered alreadyOrdered without failing the others; the
   * entries that do not fit are answered short and fall over to another segment. Throws
   * UncertainBatch when PostgreSQL may have committed without telling.
   */
  async sellBatch(productId: number, idx: number, entries: BatchEntry[]): Promise<BatchAttempt> {
    const tag = randomUUID();
    const sentAt = process.hrtime.bigint();
    type Row = {
      kind: 'sold' | 'held' | 'chosen' | 'left';
      user_id: string | null;
      id: string | null;
      created_at: Date | null;
      expires_at: Date | null;
      stock: string | null;
    };
    const uncertain = (err: unknown) => new UncertainBatch(entries.map((e) => new UncertainWrite(productId, e.userId, e.quantity, [idx], tag, sentAt, err)));
    const params = [productId, idx, entries.map((e) => e.userId), entries.map((e) => e.quantity)];
    let rows: Row[];
    // One autocommit statement: a lost reply is settled per order like a single sale's. While units
    // come back (cancels, expiries) or a rebalance moves them, the statement has been seen to decide
    // on a row version other than the one it deducts from; CHECK (stock >= 0) then refuses it whole
    // (nothing written). It then runs again inside a transaction that first locks the segment row
    // in a statement of its own, so the batch statement's snapshot is taken with the row already
    // ours and every committed change to it visible: what it decides on is what it deducts from.
    try {
      rows = await this.db.query<Row[]>(tagged(tag, SELL_BATCH_SQL), params);
    } catch (err) {
      if (writeFailure(err) === 'unknown') throw uncertain(err);
      if (sqlState(err) !== CHECK_VIOLATION) throw this.mapped(err);
      this.metrics.batchRetries.inc();
      try {
        rows = await this.inTransaction(tag, uncertain, async (tx) => {
          await tx.query('SELECT 1 FROM stock_segments WHERE product_id = $1 AND idx = $2 FOR UPDATE', [productId, idx]);
          return (await tx.query(tagged(tag, SELL_BATCH_SQL), params)) as Row[];
        });
      } catch (again) {
        if (sqlState(again) === CHECK_VIOLATION) throw new BusyError('the segment changed under the batch, retry', this.http.retryAfterS);
        throw again;
      }
    }
    const sold = new Map<string, { id: string; createdAt: Date; expiresAt: Date }>();
    const held = new Set<string>();
    const chosen = new Set<string>();
    let remaining: number | null = null;
    for (const r of rows) {
      if (r.kind === 'sold') sold.set(r.user_id as string, { id: r.id as string, createdAt: r.created_at as Date, expiresAt: r.expires_at as Date });
      else if (r.kind === 'held') held.add(r.user_id as string);
      else if (r.kind === 'chosen') chosen.add(r.user_id as string);
      else remaining = r.stock === null ? null : Number(r.stock);
    }
    const results = entries.map((e): BatchResult => {
      const s = sold.get(e.userId);
      if (s) {
        sold.delete(e.userId); // a second entry of the same user (no user lock) is a duplicate
        return { kind: 'sold', order: reserved(s.id, productId, e.userId, e.quantity, [{ segment: idx, quantity: e.quantity }], s.createdAt, s.expiresAt) };
      }
      // Held before this statement, or inserted concurrently (chosen, then skipped by ON CONFLICT).
      if (held.has(e.userId) || chosen.has(e.userId)) return { kind: 'alreadyOrdered' };
      return { kind: 'short' };
    });
    return { results, remaining };
  }

  /**
   * Sells q units spread over several segments in one transaction, reading their stock under
   * row locks (ascending). Null when they no longer hold q between them.
   */
  async sellFromSegments(productId: number, indexes: number[], q: number, userId: string, holdInTxMs = 0): Promise<OrderRow | null> {
    const tag = randomUUID();
    const sentAt = process.hrtime.bigint();
    const uncertain = (err: unknown) => new UncertainWrite(productId, userId, q, indexes, tag, sentAt, err);
    return this.inTransaction(tag, uncertain, async (tx) => {
      const rows = (await tx.query(
        tagged(tag, 'SELECT idx, stock FROM stock_segments WHERE product_id = $1 AND idx = ANY($2::int[]) ORDER BY idx FOR UPDATE'),
        [productId, indexes],
      )) as Array<{ idx: number; stock: string }>;
      const takes = takeFrom(
        q,
        rows.map((r) => ({ idx: r.idx, stock: Number(r.stock) })),
      );
      if (!takes) return null;
      for (const t of takes) {
        await tx.query(tagged(tag, 'UPDATE stock_segments SET stock = stock - $3::int WHERE product_id = $1 AND idx = $2 AND stock >= $3::int'), [
          productId,
          t.segment,
          t.quantity,
        ]);
      }
      if (holdInTxMs > 0) await sleep(holdInTxMs);
      const [ins] = await this.insertOrder(tx, tag, productId, userId, q, takes);
      return reserved(ins.id, productId, userId, q, takes, ins.created_at, ins.expires_at);
    });
  }

  async findById(id: string): Promise<OrderRow | null> {
    try {
      const rows = await this.db.query<OrderRecord[]>(`SELECT ${ORDER_COLUMNS} FROM orders WHERE id = $1`, [id]);
      return rows.length === 0 ? null : toRow(rows[0]);
    } catch (err) {
      throw this.mapped(err);
    }
  }

  /** The user's live order of the product, if any (the partial unique index orders_one_live_per_user answers). */
  async findByKey(productId: number, userId: string): Promise<OrderRow | null> {
    try {
      const rows = await this.db.query<OrderRecord[]>(`SELECT ${ORDER_COLUMNS} FROM orders WHERE product_id = $1 AND user_id = $2 AND ${LIVE}`, [
        productId,
        userId,
      ]);
      return rows.length === 0 ? null : toRow(rows[0]);
    } catch (err) {
      throw this.mapped(err);
    }
  }

  /**
   * Pays a reserved order, in one statement: PostgreSQL decides at that moment whether the
   * reservation still runs (`expires_at > now()`), so a payment can never land on an order whose
   * units the sweep returned or is returning. Paying a paid order answers it unchanged.
   */
  async pay(orderId: string, userId: string): Promise<{ order: OrderRow; changed: boolean }> {
    const tag = randomUUID();
    let rows: OrderRecord[];
    try {
      [rows] = await this.db.query<Updated<OrderRecord>>(
        tagged(
          tag,
          `UPDATE orders SET status = 'paid', paid_at = now()
            WHERE id = $1 AND user_id = $2 AND status = 'reserved' AND expires_at > now()
           RETURNING ${ORDER_COLUMNS}`,
        ),
        [orderId, userId],
      );
    } catch (err) {
      if (writeFailure(err) !== 'unknown') throw this.mapped(err);
      const order = await this.settleChange(new UncertainChange(tag, err), orderId, userId, (r) => (r.status === 'paid' ? r : refusePay(r)));
      return { order, changed: true };
    }
    if (rows.length > 0) return { order: toRow(rows[0]), changed: true };
    const found = await this.findOwned(orderId, userId);
    if (found.status === 'paid') return { order: toRow(found), changed: false };
    return refusePay(found) ?? this.unchangedYet(found);
  }

  /**
   * Cancels a reserved order and puts its units back in the same transaction (see returnUnits).
   * Cancelling a cancelled order answers it unchanged. A reservation past its expiresAt is
   * expired, not cancelled: 409 ORDER_EXPIRED, and the sweep returns its units.
   */
  async cancel(orderId: string, userId: string): Promise<{ order: OrderRow; returned: ReturnedUnits | null }> {
    const tag = randomUUID();
    const decide = (r: OrderRecord & { open?: boolean }): OrderRow | null => {
      if (r.status === 'cancelled') return toRow(r);
      if (r.status === 'paid') throw new OrderPaidError(Number(r.id));
      if (r.status === 'expired' || r.open === false) throw new OrderExpiredError(Number(r.id));
      return null;
    };
    try {
      return await this.inTransaction(
        tag,
        (err) => new UncertainChange(tag, err),
        async (tx) => {
          const [head] = (await tx.query('SELECT product_id, user_id FROM orders WHERE id = $1', [orderId])) as Array<{ product_id: number; user_id: string }>;
          if (!head || head.user_id !== userId) throw new OrderNotFoundError(orderId);
          const product = await lockProductForReturns(tx, head.product_id);
          if (!product) throw new OrderNotFoundError(orderId);
          const [row] = (await tx.query(`SELECT ${ORDER_COLUMNS}, expires_at > now() AS open FROM orders WHERE id = $1 FOR UPDATE`, [orderId])) as Array<
            OrderRecord & { open: boolean }
          >;
          const settled = decide(row);
          if (settled) return { order: settled, returned: null };
          const returned = await returnUnits(tx, tag, head.product_id, product, [row]);
          const [[done]] = (await tx.query(tagged(tag, `UPDATE orders SET status = 'cancelled', closed_at = now() WHERE id = $1 RETURNING ${ORDER_COLUMNS}`), [
            orderId,
          ])) as Updated<OrderRecord>;
          return { order: toRow(done), returned };
        },
      );
    } catch (err) {
      if (!(err instanceof UncertainChange)) throw err;
      const order = await this.settleChange(err, orderId, userId, (r) => decide(r));
      return { order, returned: null };
    }
  }

  /** Products that have reservations past their expiresAt, oldest first. */
  async productsWithDueReservations(limit: number): Promise<number[]> {
    try {
      const rows = await this.db.query<Array<{ product_id: number }>>(
        `SELECT DISTINCT product_id FROM (
           SELECT product_id FROM orders WHERE status = 'reserved' AND expires_at <= now() ORDER BY expires_at LIMIT $1
         ) due`,
        [limit],
      );
      return rows.map((r) => r.product_id);
    } catch (err) {
      throw this.mapped(err);
    }
  }

  /**
   * Expires up to `limit` reservations of one product that ran out, and returns their units, in one
   * transaction. Any number of processes may sweep at once: SKIP LOCKED hands each order to one of
   * them, and `status = 'reserved'` is re-checked under the row lock, so a unit comes back once. A
   * sweeper that dies mid-transaction returns nothing; the next sweep finds the same orders.
   */
  async expireDue(productId: number, limit: number): Promise<Expired> {
    const tag = randomUUID();
    return this.inTransaction(
      tag,
      (err) => this.mapped(err) as Error,
      async (tx) => {
        const product = await lockProductForReturns(tx, productId);
        if (!product) return { orders: 0, returned: null, lagsMs: [] };
        const rows = (await tx.query(
          `SELECT id, allocations, (extract(epoch FROM now() - expires_at) * 1000)::float8 AS lag_ms
             FROM orders WHERE product_id = $1 AND status = 'reserved' AND expires_at <= now()
            ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
          [productId, limit],
        )) as Array<{ id: string; allocations: Allocation[]; lag_ms: number }>;
        if (rows.length === 0) return { orders: 0, returned: null, lagsMs: [] };
        const returned = await returnUnits(tx, tag, productId, product, rows);
        await tx.query(tagged(tag, `UPDATE orders SET status = 'expired', closed_at = now() WHERE id = ANY($1::bigint[])`), [rows.map((r) => r.id)]);
        return { orders: rows.length, returned, lagsMs: rows.map((r) => r.lag_ms) };
      },
    );
  }

  /** The order, if it exists and belongs to the user; else ORDER_NOT_FOUND (another user's order is not shown to exist). */
  private async findOwned(orderId: string, userId: string): Promise<OrderRecord> {
    let rows: OrderRecord[];
    try {
      rows = await this.db.query<OrderRecord[]>(`SELECT ${ORDER_COLUMNS}, expires_at > now() AS open FROM orders WHERE id = $1`, [orderId]);
    } catch (err) {
      throw this.mapped(err);
    }
    if (rows.length === 0 || rows[0].user_id !== userId) throw new OrderNotFoundError(orderId);
    return rows[0];
  }

  /** A reserved, open order that a conditional change still found in its way: a race just lost, retry. */
  private unchangedYet(r: OrderRecord): never {
    throw new BusyError(`order ${r.id} changed during the call, retry`, this.http.retryAfterS);
  }

  /**
   * A pay or cancel whose reply was lost: within DB_TIMEOUT_MS, once no statement of the attempt
   * runs any more, the order's state is the truth. `decide` answers the order (the change took
   * effect, or had before), throws the refusal that applies (409), or null: the order is as it
   * was, so nothing happened (UNAVAILABLE). Unknown at the deadline: OUTCOME_UNKNOWN.
   */
  private settleChange(
    u: UncertainChange,
    orderId: string,
    userId: string,
    decide: (r: OrderRecord & { open?: boolean }) => OrderRecord | OrderRow | null,
  ): Promise<OrderRow> {
    const read = async () =>
      (
        await this.db.query<Array<OrderRecord & { open: boolean }>>(`SELECT ${ORDER_COLUMNS}, expires_at > now() AS open FROM orders WHERE id = $1`, [orderId])
      )[0];
    return this.untilKnown(
      u.tag,
      u.cause,
      read,
      (found) => {
        if (!found || found.user_id !== userId) throw new OrderNotFoundError(orderId);
        const answer = decide(found);
        if (answer === null) throw new UnavailableError('postgres', this.http.retryAfterS, u.cause);
        return 'user_id' in answer ? toRow(answer) : answer;
      },
      TRANSITION_UNKNOWN,
    );
  }

  /**
   * The loop both settlings share. Within DB_TIMEOUT_MS, retrying every SETTLE_RETRY_MS while
   * PostgreSQL comes back: first whether a statement tagged `tag` is still active or its
   * transaction open, then, once none is, `read` what the write left (a new snapshot: a write that
   * ended after the first query is seen by the second). `decide` turns that into the answer, or
   * throws the answer (UNAVAILABLE when nothing happened, a 404 or 409). Still unknown at the
   * deadline: OUTCOME_UNKNOWN. Counted once as a PostgreSQL error, whatever the end.
   */
  private async untilKnown<R, T>(tag: string, cause: unknown, read: () => Promise<R>, decide: (found: R) => T, unknownMessage?: string): Promise<T> {
    this.metrics.dependencyErrors.inc({ dependency: 'postgres' });
    const deadline = Date.now() + this.database.timeoutMs;
    let lastError = cause;
    while (Date.now() < deadline) {
      try {
        const found = await withinMs(deadline - Date.now(), async () => ((await this.running(tag)) ? null : { value: await read() }));
        if (found) return decide(found.value);
        lastError = new Error('the write is still running in PostgreSQL');
      } catch (err) {
        if (err instanceof DomainError) throw err;
        lastError = err;
      }
      await sleep(Math.min(SETTLE_RETRY_MS, Math.max(0, deadline - Date.now())));
    }
    throw new OutcomeUnknownError(this.http.retryAfterS, lastError, unknownMessage);
  }

  /** Whether a statement of the attempt tagged `tag` is still active or its transaction open. */
  private async running(tag: string): Promise<boolean> {
    const [{ running }] = await this.db.query<Array<{ running: number }>>(
      `SELECT count(*)::int AS running FROM pg_stat_activity
        WHERE pid <> pg_backend_pid() AND state IS DISTINCT FROM 'idle' AND starts_with(query, $1)`,
      [tagged(tag, '')],
    );
    return running > 0;
  }

  /**
   * Learns what became of an uncertain write, within DB_TIMEOUT_MS, retrying while PostgreSQL
   * comes back:
   * - no statement of the attempt still runs (pg_stat_activity) and the user has no order: it did
   *   not commit, and never will: UNAVAILABLE (nothing happened);
   * - the user has an order created since the write was sent: that is this write's order (a 201);
   * - the user has an older order: it predates this request, which therefore changed nothing:
   *   ALREADY_ORDERED with that order's id;
   * - PostgreSQL did not answer in time, or the attempt still runs: OUTCOME_UNKNOWN.
   * "Since the write was sent" is judged without comparing clocks: the order's age by
   * PostgreSQL's clock against the time since sending by this process's monotonic clock. Only an
   * order of the same user committed within milliseconds before this write could be mistaken for
   * it; the user lock makes that impossible in redlock mode, and either way the order is real.
   */
  settle(w: UncertainWrite): Promise<OrderRow> {
    const read = async () =>
      (
        await this.db.query<OrderRecord[]>(
          `SELECT ${ORDER_COLUMNS}, (extract(epoch FROM clock_timestamp() - created_at) * 1000)::float8 AS age_ms
             FROM orders WHERE product_id = $1 AND user_id = $2 AND ${LIVE}`,
          [w.productId, w.userId],
        )
      )[0];
    return this.untilKnown(w.tag, w.cause, read, (found) => {
      if (!found) throw new UnavailableError('postgres', this.http.retryAfterS, w.cause);
      const sinceSentMs = Number(process.hrtime.bigint() - w.sentAt) / 1e6;
      const mine =
        (found.age_ms ?? Infinity) <= sinceSentMs + 5 && found.quantity === w.quantity && found.allocations.every((a) => w.segments.includes(a.segment));
      if (!mine) throw new AlreadyOrderedError(Number(found.id));
      return toRow(found);
    });
  }

  /**
   * A transaction whose COMMIT alone can be uncertain: a failure before it leaves the transaction
   * uncommitted (PostgreSQL rolls back what a lost session left open), so it maps as usual.
   */
  private async inTransaction<T>(tag: string, uncertain: (err: unknown) => Error, work: (tx: QueryRunner) => Promise<T>): Promise<T> {
    let runner: QueryRunner | undefined;
    let committing = false;
    // A session whose transaction may still be open must never go back to the pool: the next
    // borrower's statements would run inside that transaction and be rolled back with it, after
    // their callers were told they succeeded. (pg drops a queued ROLLBACK whose read timeout fires
    // before it was sent, e.g. behind a statement stuck in a frozen PostgreSQL.)
    let poisoned = false;
    try {
      runner = this.db.createQueryRunner();
      await runner.query('START TRANSACTION');
      const result = await work(runner);
      committing = true;
      await runner.query(tagged(tag, 'COMMIT'));
      return result;
    } catch (err) {
      if (runner && !committing) {
        await runner.query('ROLLBACK').catch(() => {
          poisoned = true;
        });
      }
      if (committing && writeFailure(err) !== 'rejected') poisoned = true;
      if (committing && writeFailure(err) === 'unknown') throw uncertain(err);
      throw this.mapped(err);
    } finally {
      if (poisoned) endSession(runner);
      await runner?.release();
    }
  }

  private insertOrder(tx: QueryRunner, tag: string, productId: number, userId: string, q: number, allocations: Allocation[]) {
    return tx.query(tagged(tag, INSERT_ORDER_SQL), [productId, userId, q, JSON.stringify(allocations)]) as Promise<
      Array<{ id: string; created_at: Date; expires_at: Date }>
    >;
  }

  private mapped(err: unknown): unknown {
    const mapped = mapDatabaseError(err, this.http.retryAfterS);
    if (mapped instanceof UnavailableError) this.metrics.dependencyErrors.inc({ dependency: 'postgres' });
    return mapped;
  }
}

/** Why a payment cannot take the order: the refusal to throw, or null when nothing refuses it. */
function refusePay(r: OrderRecord & { open?: boolean }): null {
  if (r.status === 'cancelled') throw new OrderCancelledError(Number(r.id));
  if (r.status === 'expired' || (r.status === 'reserved' && r.open === false)) throw new OrderExpiredError(Number(r.id));
  return null;
}

/**
 * The first step of every return of units: the product row FOR SHARE. A rebalance or a restock
 * takes it FOR NO KEY UPDATE, so a return never meets segments being rewritten (its UPDATE would
 * skip a row a rebalance deleted and lose the units); returns do not block each other or sales.
 * Null when the product is gone.
 */
async function lockProductForReturns(tx: QueryRunner, productId: number): Promise<{ layoutVersion: number; segmentCount: number } | null> {
  const [p] = (await tx.query('SELECT layout_version, segment_count FROM products WHERE id = $1 FOR SHARE', [productId])) as Array<{
    layout_version: number;
    segment_count: number;
  }>;
  return p ? { layoutVersion: p.layout_version, segmentCount: p.segment_count } : null;
}

/**
 * Puts the units of orders (locked FOR UPDATE by the caller, whose status change follows in the
 * same transaction) back into the segments they came from, or into the smallest segment when a
 * rebalance removed theirs. The segment rows are locked in ascending order, like every multi-row
 * taker of this schema, so a return never deadlocks with a sale, another return or a sweep.
 */
async function returnUnits(
  tx: QueryRunner,
  tag: string,
  productId: number,
  product: { layoutVersion: number; segmentCount: number },
  orders: Array<{ allocations: Allocation[] }>,
): Promise<ReturnedUnits> {
  const back = new Map<number, number>();
  let smallest: number | undefined;
  for (const order of orders) {
    for (const a of order.allocations) {
      let target = a.segment;
      if (target >= product.segmentCount) {
        if (smallest === undefined) {
          const [s] = (await tx.query('SELECT idx FROM stock_segments WHERE product_id = $1 ORDER BY stock, idx LIMIT 1', [productId])) as Array<{
            idx: number;
          }>;
          smallest = s.idx;
        }
        target = smallest;
      }
      back.set(target, (back.get(target) ?? 0) + a.quantity);
    }
  }
  const segments = [...back.keys()].sort((a, b) => a - b);
  const units = segments.map((i) => back.get(i) as number);
  await tx.query('SELECT idx FROM stock_segments WHERE product_id = $1 AND idx = ANY($2::int[]) ORDER BY idx FOR UPDATE', [productId, segments]);
  const updated = (await tx.query(
    tagged(
      tag,
      `UPDATE stock_segments s SET stock = s.stock + v.q FROM unnest($2::int[], $3::bigint[]) AS v(idx, q) WHERE s.product_id = $1 AND s.idx = v.idx`,
    ),
    [productId, segments, units],
  )) as [unknown, number];
  // The product lock keeps every segment below segment_count in place; anything else is a bug that must not lose units.
  if (updated[1] !== segments.length) throw new Error(`returning units of product ${productId}: ${updated[1]} of ${segments.length} segments found`);
  return { productId, layoutVersion: product.layoutVersion, segments, units: units.reduce((a, b) => a + b, 0) };
}

/**
 * Ends the query runner's PostgreSQL session (the server rolls back whatever it left open); pg-pool
 * then drops the client on release instead of lending it again.
 */
function endSession(runner: QueryRunner | undefined): void {
  const client = (runner as unknown as { databaseConnection?: { end(): Promise<void> } } | undefined)?.databaseConnection;
  client?.end().catch(() => undefined);
}

/** Puts the attempt's tag first in the statement, where pg_stat_activity keeps it. */
function tagged(tag: string, sql: string): string {
  return `/* order-write ${tag} */ ${sql}`;
}

/** Rejects when `work` takes longer than `ms` (its query is left to its own timeouts). */
function withinMs<T>(ms: number, work: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([work(), timeout]).finally(() => clearTimeout(timer));
}
