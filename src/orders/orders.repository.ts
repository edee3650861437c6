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
import { AlreadyOrderedError, BusyError, OutcomeUnknownError, UnavailableError } from '../common/domain-errors';
import { takeFrom } from '../inventory/segment-plan';
import { MetricsService } from '../metrics/metrics.service';

export interface Allocation {
  segment: number;
  quantity: number;
}

export interface OrderRow {
  id: number;
  productId: number;
  userId: string;
  quantity: number;
  allocations: Allocation[];
  createdAt: Date;
}

/** One order of a batch: what it asks for. */
export interface BatchEntry {
  userId: string;
  quantity: number;
}

/** The answer for one entry of a batch. */
export type BatchResult = { order: OrderRow } | { alreadyOrdered: true } | { short: true };

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

export interface SegmentAttempt {
  /** The order, when the segment held enough. */
  order?: OrderRow;
  /** Units left in the segment after the attempt; null when the segment no longer exists (or is unknown). */
  remaining: number | null;
}

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

// One statement is one transaction: deduct from the segment if it holds q, insert the order from
// the deducted row, and always report what the segment has left.
const SELL_FROM_SEGMENT_SQL = `
  WITH seg AS (
    UPDATE stock_segments SET stock = stock - $3::int
     WHERE product_id = $1 AND idx = $2 AND stock >= $3::int
    RETURNING idx, stock
  ), ins AS (
    INSERT INTO orders (product_id, user_id, quantity, allocations)
    SELECT $1, $4, $3::int, jsonb_build_array(jsonb_build_object('segment', seg.idx, 'quantity', $3::int)) FROM seg
    RETURNING id, created_at
  )
  SELECT ins.id, ins.created_at,
         COALESCE((SELECT stock FROM seg),
                  (SELECT stock FROM stock_segments WHERE product_id = $1 AND idx = $2)) AS remaining
    FROM (SELECT 1) AS one LEFT JOIN ins ON true`;

// Group commit: several orders from one segment in one statement. The segment row is locked
// first; the orders that fit (smallest quantities first, then in arrival order) are inserted,
// skipping users who already hold an order (also one inserted concurrently: ON CONFLICT), and the
// segment is deducted by exactly what was inserted; CHECK (stock >= 0) still refuses any deduction
// past zero. Rows: one per sold order, one per user found holding an order ('held'), one per
// order chosen to fit ('chosen'), and one 'left' with the segment's stock afterwards (null when
// the segment no longer exists).
const SELL_BATCH_SQL = `
  WITH req AS (
    SELECT r.user_id, r.quantity, r.ord
      FROM unnest($3::varchar[], $4::int[]) WITH ORDINALITY AS r(user_id, quantity, ord)
  ), seg AS (
    SELECT stock FROM stock_segments WHERE product_id = $1 AND idx = $2 FOR UPDATE
  ), fresh AS (
    SELECT req.* FROM req
     WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.product_id = $1 AND o.user_id = req.user_id)
  ), chosen AS (
    SELECT f.user_id, f.quantity, f.ord
      FROM (SELECT fresh.*, sum(fresh.quantity) OVER (ORDER BY fresh.quantity, fresh.ord) AS running FROM fresh) f, seg
     WHERE f.running <= seg.stock
  ), ins AS (
    INSERT INTO orders (product_id, user_id, quantity, allocations)
    SELECT $1, c.user_id, c.quantity, jsonb_build_array(jsonb_build_object('segment', $2::int, 'quantity', c.quantity))
      -- one global order of insertion: two batches that meet on the one-order-per-user key (no user
      -- lock while its Redis is down) wait for each other in the same order, never in a cycle
      FROM chosen c ORDER BY c.user_id
    ON CONFLICT ON CONSTRAINT orders_one_per_user DO NOTHING
    RETURNING id, user_id, quantity, created_at
  ), upd AS (
    UPDATE stock_segments SET stock = stock - (SELECT sum(quantity) FROM ins)
     WHERE product_id = $1 AND idx = $2 AND EXISTS (SELECT 1 FROM ins)
    RETURNING stock
  )
  SELECT 'sold' AS kind, user_id, id, created_at, NULL::bigint AS stock FROM ins
  UNION ALL
  SELECT 'held', user_id, NULL, NULL, NULL FROM req WHERE NOT EXISTS (SELECT 1 FROM fresh WHERE fresh.ord = req.ord)
  UNION ALL
  SELECT 'chosen', user_id, NULL, NULL, NULL FROM chosen
  UNION ALL
  SELECT 'left', NULL, NULL, NULL, COALESCE((SELECT stock FROM upd), (SELECT stock FROM seg))`;

const INSERT_ORDER_SQL = `
  INSERT INTO orders (product_id, user_id, quantity, allocations) VALUES ($1, $2, $3, $4::jsonb)
  RETURNING id, created_at`;

const ORDER_COLUMNS = 'id, product_id, user_id, quantity, allocations, created_at';

/** An order as it comes back from a read, with its age by PostgreSQL's own clock. */
interface OrderRecord {
  id: string;
  product_id: number;
  user_id: string;
  quantity: number;
  allocations: Allocation[];
  created_at: Date;
  age_ms?: number;
}

const toRow = (r: OrderRecord): OrderRow => ({
  id: Number(r.id),
  productId: r.product_id,
  userId: r.user_id,
  quantity: r.quantity,
  allocations: r.allocations,
  createdAt: r.created_at,
});

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
    const order = (id: string, createdAt: Date): OrderRow => ({
      id: Number(id),
      productId,
      userId,
      quantity: q,
      allocations: [{ segment: idx, quantity: q }],
      createdAt,
    });
    const tag = randomUUID();
    const sentAt = process.hrtime.bigint();
    const uncertain = (err: unknown) => new UncertainWrite(productId, userId, q, [idx], tag, sentAt, err);
    if (holdInTxMs === 0) {
      try {
        const [row] = await this.db.query<Array<{ id: string | null; created_at: Date | null; remaining: string | null }>>(tagged(tag, SELL_FROM_SEGMENT_SQL), [
          productId,
          idx,
          q,
          userId,
        ]);
        const remaining = row.remaining === null ? null : Number(row.remaining);
        return row.id === null ? { remaining } : { order: order(row.id, row.created_at as Date), remaining };
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
        return { remaining: seg ? Number(seg.stock) : null };
      }
      await sleep(holdInTxMs);
      const [ins] = await this.insertOrder(tx, tag, productId, userId, q, [{ segment: idx, quantity: q }]);
      return { order: order(ins.id, ins.created_at), remaining: Number(updated[0][0].stock) };
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
    type Row = { kind: 'sold' | 'held' | 'chosen' | 'left'; user_id: string | null; id: string | null; created_at: Date | null; stock: string | null };
    const uncertain = (err: unknown) => new UncertainBatch(entries.map((e) => new UncertainWrite(productId, e.userId, e.quantity, [idx], tag, sentAt, err)));
    const params = [productId, idx, entries.map((e) => e.userId), entries.map((e) => e.quantity)];
    let rows: Row[] | undefined;
    // One autocommit statement: a lost reply is settled per order like a single sale's. During a
    // rebalance the statement has been seen to decide on a row version older than the one it
    // deducts from; CHECK (stock >= 0) then refuses it whole (nothing written) and it runs once more
    // on a fresh snapshot; refused twice, the orders get BUSY, which means nothing happened.
    for (let attempt = 0; !rows; attempt++) {
      try {
        rows = await this.db.query<Row[]>(tagged(tag, SELL_BATCH_SQL), params);
      } catch (err) {
        if (writeFailure(err) === 'unknown') throw uncertain(err);
        if (sqlState(err) !== CHECK_VIOLATION) throw this.mapped(err);
        if (attempt >= 1) throw new BusyError('the segment changed under the batch, retry', this.http.retryAfterS);
      }
    }
    const sold = new Map<string, { id: string; createdAt: Date }>();
    const held = new Set<string>();
    const chosen = new Set<string>();
    let remaining: number | null = null;
    for (const r of rows) {
      if (r.kind === 'sold') sold.set(r.user_id as string, { id: r.id as string, createdAt: r.created_at as Date });
      else if (r.kind === 'held') held.add(r.user_id as string);
      else if (r.kind === 'chosen') chosen.add(r.user_id as string);
      else remaining = r.stock === null ? null : Number(r.stock);
    }
    const results = entries.map((e): BatchResult => {
      const s = sold.get(e.userId);
      if (s) {
        sold.delete(e.userId); // a second entry of the same user (no user lock) is a duplicate
        const allocations = [{ segment: idx, quantity: e.quantity }];
        return { order: { id: Number(s.id), productId, userId: e.userId, quantity: e.quantity, allocations, createdAt: s.createdAt } };
      }
      // Held before this statement, or inserted concurrently (chosen, then skipped by ON CONFLICT).
      if (held.has(e.userId) || chosen.has(e.userId)) return { alreadyOrdered: true };
      return { short: true };
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
      return { id: Number(ins.id), productId, userId, quantity: q, allocations: takes, createdAt: ins.created_at };
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

  /** The user's order of the product, if any (the unique key orders_one_per_user answers). */
  async findByKey(productId: number, userId: string): Promise<OrderRow | null> {
    try {
      const rows = await this.db.query<OrderRecord[]>(`SELECT ${ORDER_COLUMNS} FROM orders WHERE product_id = $1 AND user_id = $2`, [productId, userId]);
      return rows.length === 0 ? null : toRow(rows[0]);
    } catch (err) {
      throw this.mapped(err);
    }
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
  async settle(w: UncertainWrite): Promise<OrderRow> {
    const deadline = Date.now() + this.database.timeoutMs;
    let lastError: unknown = w.cause;
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) break;
      try {
        const found = await withinMs(left, () => this.lookUp(w));
        if (found === 'running') {
          lastError = new Error('the write is still running in PostgreSQL');
        } else if (found === null) {
          throw new UnavailableError('postgres', this.http.retryAfterS, w.cause);
        } else {
          const sinceSentMs = Number(process.hrtime.bigint() - w.sentAt) / 1e6;
          const mine =
            (found.age_ms ?? Infinity) <= sinceSentMs + 5 && found.quantity === w.quantity && found.allocations.every((a) => w.segments.includes(a.segment));
          if (!mine) throw new AlreadyOrderedError(Number(found.id));
          this.metrics.dependencyErrors.inc({ dependency: 'postgres' });
          return toRow(found);
        }
      } catch (err) {
        if (err instanceof UnavailableError || err instanceof AlreadyOrderedError) {
          this.metrics.dependencyErrors.inc({ dependency: 'postgres' });
          throw err;
        }
        lastError = err;
      }
      await sleep(Math.min(SETTLE_RETRY_MS, Math.max(0, deadline - Date.now())));
    }
    this.metrics.dependencyErrors.inc({ dependency: 'postgres' });
    throw new OutcomeUnknownError(this.http.retryAfterS, lastError);
  }

  /**
   * First whether a statement of the attempt is still active or its transaction open, then the
   * order. In this order: a write that ends after the first read is seen by the second (a new
   * snapshot), so "no order" then means it never committed.
   */
  private async lookUp(w: UncertainWrite): Promise<OrderRecord | 'running' | null> {
    const [{ running }] = await this.db.query<Array<{ running: number }>>(
      `SELECT count(*)::int AS running FROM pg_stat_activity
        WHERE pid <> pg_backend_pid() AND state IS DISTINCT FROM 'idle' AND starts_with(query, $1)`,
      [tagged(w.tag, '')],
    );
    if (running > 0) return 'running';
    const rows = await this.db.query<OrderRecord[]>(
      `SELECT ${ORDER_COLUMNS}, (extract(epoch FROM clock_timestamp() - created_at) * 1000)::float8 AS age_ms
         FROM orders WHERE product_id = $1 AND user_id = $2`,
      [w.productId, w.userId],
    );
    return rows[0] ?? null;
  }

  /**
   * A transaction whose COMMIT alone can be uncertain: a failure before it leaves the transaction
   * uncommitted (PostgreSQL rolls back what a lost session left open), so it maps as usual.
   */
  private async inTransaction<T>(tag: string, uncertain: (err: unknown) => UncertainWrite, work: (tx: QueryRunner) => Promise<T>): Promise<T> {
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
    return tx.query(tagged(tag, INSERT_ORDER_SQL), [productId, userId, q, JSON.stringify(allocations)]) as Promise<Array<{ id: string; created_at: Date }>>;
  }

  private mapped(err: unknown): unknown {
    const mapped = mapDatabaseError(err, this.http.retryAfterS);
    if (mapped instanceof UnavailableError) this.metrics.dependencyErrors.inc({ dependency: 'postgres' });
    return mapped;
  }
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
