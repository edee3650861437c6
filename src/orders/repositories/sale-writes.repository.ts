// The SQL that sells units: one order from one segment (deduct and insert in one statement), a
// batch of orders from one segment (group commit, one statement), and one order spread over several
// segments (one transaction). Every deduction is conditional (`stock >= q`) and the schema has
// CHECK (stock >= 0), so no path can oversell even if a Redis lock was lost. Every deduction also
// stores the fencing token of the lock it was made under, and PostgreSQL refuses a stale one
// (answered as Fenced: nothing written). A write whose reply was lost is thrown as UncertainWrite
// (or UncertainBatch) for OutcomesRepository.settle.
import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { DataSource, QueryRunner } from 'typeorm';
import { HttpConfig } from '../../config/app-config';
import { sqlState, staleFence, writeFailure } from '../../common/database-errors';
import { BusyError } from '../../common/domain-errors';
import { inTransaction } from '../../database/transactions';
import { mappedFailure } from '../../database/mapped-failure';
import { takeFrom } from '../../inventory/segment-plan';
import { MetricsService } from '../../metrics/metrics.service';
import {
  Allocation,
  BatchAttempt,
  BatchEntry,
  BatchResult,
  Fenced,
  OrderRow,
  SegmentAttempt,
  UncertainBatch,
  UncertainWrite,
} from '../order.types';
import { LIVE, tagged } from './order-sql';

/** When a reservation made now runs out: the product's payment timeout, read in the same statement. */
const EXPIRES_AT = (productParam: string) =>
  `now() + make_interval(secs => (SELECT payment_timeout_s FROM products WHERE id = ${productParam}))`;

// One statement is one transaction: deduct from the segment if it holds q (storing the lock's
// fencing token $6), insert the reserved order from the deducted row, and always report what the
// segment has left.
const SELL_FROM_SEGMENT_SQL = `
  WITH seg AS (
    UPDATE stock_segments SET stock = stock - $3::int, fence = $6::bigint
     WHERE product_id = $1 AND idx = $2 AND stock >= $3::int
    RETURNING idx, stock
  ), ins AS (
    INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at, admission_position)
    SELECT $1, $4, $3::int, jsonb_build_array(jsonb_build_object('segment', seg.idx, 'quantity', $3::int)), 'reserved', ${EXPIRES_AT('$1')}, $5::bigint FROM seg
    RETURNING id, created_at, expires_at
  )
  SELECT ins.id, ins.created_at, ins.expires_at,
         COALESCE((SELECT stock FROM seg),
                  (SELECT stock FROM stock_segments WHERE product_id = $1 AND idx = $2)) AS remaining
    FROM (SELECT 1) AS one LEFT JOIN ins ON true`;

// Group commit: several orders from one segment in one statement. The segment row is locked
// first; the orders that fit (smallest quantities first, then in arrival order) are inserted,
// skipping users who already hold a live order (also one inserted concurrently: ON CONFLICT, which
// also skips an admission spent concurrently, see orders_admission_spent), and the
// segment is deducted by exactly what was inserted, storing the lock's fencing token $6; CHECK
// (stock >= 0) still refuses any deduction past zero, and a stale token the whole statement. Rows: one per sold order, one per user found holding an order ('held'), one per
// order chosen to fit ('chosen'), and one 'left' with the segment's stock afterwards (null when
// the segment no longer exists).
export const SELL_BATCH_SQL = `
  WITH req AS (
    SELECT r.user_id, r.quantity, r.admission_position, r.ord
      FROM unnest($3::varchar[], $4::int[], $5::bigint[]) WITH ORDINALITY AS r(user_id, quantity, admission_position, ord)
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
    SELECT f.user_id, f.quantity, f.admission_position, f.ord
      FROM (SELECT fresh.*, sum(fresh.quantity) OVER (ORDER BY fresh.quantity, fresh.ord) AS running FROM fresh) f, seg
     WHERE f.running <= seg.stock
  ), ins AS (
    INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at, admission_position)
    SELECT $1, c.user_id, c.quantity, jsonb_build_array(jsonb_build_object('segment', $2::int, 'quantity', c.quantity)), 'reserved', ${EXPIRES_AT('$1')}, c.admission_position
      -- one global order of insertion: two batches that meet on the one-order-per-user key (no user
      -- lock while its Redis is down) wait for each other in the same order, never in a cycle
      FROM chosen c ORDER BY c.user_id
    ON CONFLICT DO NOTHING
    RETURNING id, user_id, quantity, created_at, expires_at
  ), upd AS (
    UPDATE stock_segments SET stock = stock - (SELECT sum(quantity) FROM ins), fence = $6::bigint
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
  INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at, admission_position)
  VALUES ($1, $2, $3, $4::jsonb, 'reserved', ${EXPIRES_AT('$1')}, $5::bigint)
  RETURNING id, created_at, expires_at`;

/** SQLSTATE of a CHECK constraint refusal. */
const CHECK_VIOLATION = '23514';

/** A new reserved order as a sale statement returns it. */
const reserved = (
  id: string,
  productId: number,
  userId: string,
  quantity: number,
  allocations: Allocation[],
  createdAt: Date,
  expiresAt: Date,
): OrderRow => ({
  id: Number(id),
  productId,
  userId,
  quantity,
  allocations,
  status: 'reserved',
  createdAt,
  expiresAt,
});

@Injectable()
export class SaleWritesRepository {
  constructor(
    private readonly db: DataSource,
    private readonly http: HttpConfig,
    private readonly metrics: MetricsService,
  ) {}

  /**
   * Sells q units from one segment with the order insert, atomically, in one statement, under the
   * segment lock whose fencing token is `token`. Throws UncertainWrite when PostgreSQL may have
   * committed without telling.
   */
  async sellFromSegment(
    productId: number,
    idx: number,
    token: number,
    q: number,
    userId: string,
    admissionPosition?: number,
  ): Promise<SegmentAttempt | Fenced> {
    const order = (id: string, createdAt: Date, expiresAt: Date) =>
      reserved(id, productId, userId, q, [{ segment: idx, quantity: q }], createdAt, expiresAt);
    const tag = randomUUID();
    const sentAt = process.hrtime.bigint();
    const uncertain = (err: unknown) => new UncertainWrite(productId, userId, q, [idx], tag, sentAt, err);
    try {
      const [row] = await this.db.query<
        Array<{ id: string | null; created_at: Date | null; expires_at: Date | null; remaining: string | null }>
      >(tagged(tag, SELL_FROM_SEGMENT_SQL), [productId, idx, q, userId, admissionPosition ?? null, token]);
      const remaining = row.remaining === null ? null : Number(row.remaining);
      return row.id === null
        ? { kind: 'short', remaining }
        : { kind: 'sold', order: order(row.id, row.created_at as Date, row.expires_at as Date), remaining };
    } catch (err) {
      const fence = staleFence(err);
      if (fence !== null) return this.fenced(idx, token, fence);
      throw writeFailure(err) === 'unknown' ? uncertain(err) : this.mapped(err);
    }
  }

  /**
   * Sells as many of the entries as the segment holds, in one statement (group commit). An entry
   * whose user already holds an order is answered alreadyOrdered without failing the others; the
   * entries that do not fit are answered short and fall over to another segment. Fenced (nothing
   * written) when `token`, the fencing token of the segment lock, is stale. Throws UncertainBatch
   * when PostgreSQL may have committed without telling.
   */
  async sellBatch(
    productId: number,
    idx: number,
    token: number,
    entries: BatchEntry[],
  ): Promise<BatchAttempt | Fenced> {
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
    const uncertain = (err: unknown) =>
      new UncertainBatch(
        entries.map((e) => new UncertainWrite(productId, e.userId, e.quantity, [idx], tag, sentAt, err)),
      );
    const params = [
      productId,
      idx,
      entries.map((e) => e.userId),
      entries.map((e) => e.quantity),
      entries.map((e) => e.admissionPosition ?? null),
      token,
    ];
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
      const fence = staleFence(err);
      if (fence !== null) return this.fenced(idx, token, fence);
      if (writeFailure(err) === 'unknown') throw uncertain(err);
      if (sqlState(err) !== CHECK_VIOLATION) throw this.mapped(err);
      this.metrics.batchRetries.inc();
      try {
        rows = await this.inTransaction(tag, uncertain, async (tx) => {
          await tx.query('SELECT 1 FROM stock_segments WHERE product_id = $1 AND idx = $2 FOR UPDATE', [
            productId,
            idx,
          ]);
          return (await tx.query(tagged(tag, SELL_BATCH_SQL), params)) as Row[];
        });
      } catch (again) {
        const fence = staleFence(again);
        if (fence !== null) return this.fenced(idx, token, fence);
        if (sqlState(again) === CHECK_VIOLATION)
          throw new BusyError('the segment changed under the batch, retry', this.http.retryAfterS);
        throw again;
      }
    }
    const sold = new Map<string, { id: string; createdAt: Date; expiresAt: Date }>();
    const held = new Set<string>();
    const chosen = new Set<string>();
    let remaining: number | null = null;
    for (const r of rows) {
      if (r.kind === 'sold')
        sold.set(r.user_id as string, {
          id: r.id as string,
          createdAt: r.created_at as Date,
          expiresAt: r.expires_at as Date,
        });
      else if (r.kind === 'held') held.add(r.user_id as string);
      else if (r.kind === 'chosen') chosen.add(r.user_id as string);
      else remaining = r.stock === null ? null : Number(r.stock);
    }
    const results = entries.map((e): BatchResult => {
      const s = sold.get(e.userId);
      if (s) {
        sold.delete(e.userId); // a second entry of the same user (no user lock) is a duplicate
        return {
          kind: 'sold',
          order: reserved(
            s.id,
            productId,
            e.userId,
            e.quantity,
            [{ segment: idx, quantity: e.quantity }],
            s.createdAt,
            s.expiresAt,
          ),
        };
      }
      // Held before this statement, or inserted concurrently (chosen, then skipped by ON CONFLICT; also
      // an admission an order of the same user spent meanwhile).
      if (held.has(e.userId) || chosen.has(e.userId)) return { kind: 'alreadyOrdered' };
      return { kind: 'short' };
    });
    return { kind: 'decided', results, remaining };
  }

  /**
   * Sells q units spread over several segments in one transaction, reading their stock under
   * row locks (ascending). `tokens[i]` is the fencing token of the lock on `indexes[i]`. Null
   * when they no longer hold q between them; Fenced (nothing written) when a token is stale.
   */
  async sellFromSegments(
    productId: number,
    indexes: number[],
    tokens: number[],
    q: number,
    userId: string,
    admissionPosition?: number,
  ): Promise<OrderRow | null | Fenced> {
    const tag = randomUUID();
    const sentAt = process.hrtime.bigint();
    const uncertain = (err: unknown) => new UncertainWrite(productId, userId, q, indexes, tag, sentAt, err);
    // The segment being written, for a refusal of its token.
    let writing: { idx: number; token: number } | undefined;
    try {
      return await this.inTransaction(tag, uncertain, async (tx) => {
        const rows = (await tx.query(
          tagged(
            tag,
            'SELECT idx, stock FROM stock_segments WHERE product_id = $1 AND idx = ANY($2::int[]) ORDER BY idx FOR UPDATE',
          ),
          [productId, indexes],
        )) as Array<{ idx: number; stock: string }>;
        const takes = takeFrom(
          q,
          rows.map((r) => ({ idx: r.idx, stock: Number(r.stock) })),
        );
        if (!takes) return null;
        for (const t of takes) {
          writing = { idx: t.segment, token: tokens[indexes.indexOf(t.segment)] };
          await tx.query(
            tagged(
              tag,
              'UPDATE stock_segments SET stock = stock - $3::int, fence = $4::bigint WHERE product_id = $1 AND idx = $2 AND stock >= $3::int',
            ),
            [productId, t.segment, t.quantity, writing.token],
          );
        }
        const [ins] = await this.insertOrder(tx, tag, productId, userId, q, takes, admissionPosition);
        return reserved(ins.id, productId, userId, q, takes, ins.created_at, ins.expires_at);
      });
    } catch (err) {
      const fence = staleFence(err);
      if (fence !== null && writing) return this.fenced(writing.idx, writing.token, fence);
      throw err;
    }
  }

  /** A write refused for its stale token: counted here, raised and logged by the lock's holder. */
  private fenced(segment: number, token: number, fence: number): Fenced {
    this.metrics.fencedWrites.inc();
    return { kind: 'fenced', segment, token, fence };
  }

  private insertOrder(
    tx: QueryRunner,
    tag: string,
    productId: number,
    userId: string,
    q: number,
    allocations: Allocation[],
    admissionPosition: number | undefined,
  ) {
    return tx.query(tagged(tag, INSERT_ORDER_SQL), [
      productId,
      userId,
      q,
      JSON.stringify(allocations),
      admissionPosition ?? null,
    ]) as Promise<Array<{ id: string; created_at: Date; expires_at: Date }>>;
  }

  /** The sale's transaction; only its COMMIT, tagged like its statements, can be uncertain. */
  private inTransaction<T>(
    tag: string,
    uncertain: (err: unknown) => Error,
    work: (tx: QueryRunner) => Promise<T>,
  ): Promise<T> {
    return inTransaction(
      this.db,
      { commit: tagged(tag, 'COMMIT'), uncertain, mapped: (err) => this.mapped(err) },
      work,
    );
  }

  private mapped(err: unknown): unknown {
    return mappedFailure(err, this.http.retryAfterS, this.metrics);
  }
}
