// The SQL of selling and moving stock. Every deduction is conditional (`stock >= q`) and the
// schema has CHECK (stock >= 0), so no path can oversell even if a Redis lock was lost.
import { Inject, Injectable } from '@nestjs/common';
import { DataSource, EntityManager } from 'typeorm';
import { APP_CONFIG, ResolvedConfig } from '../config/app-config';
import { mapDatabaseError } from '../common/database-errors';
import { sleep } from '../common/sleep';
import { MetricsService } from '../metrics/metrics.service';
import { Allocation } from '../orders/order.entity';
import { takeFrom } from './segment-plan';

export interface OrderRow {
  id: number;
  productId: number;
  userId: string;
  quantity: number;
  allocations: Allocation[];
  createdAt: Date;
}

export interface SegmentAttempt {
  /** The order, when the segment held enough. */
  order?: OrderRow;
  /** Units left in the segment after the attempt; null when the segment no longer exists. */
  remaining: number | null;
}

export interface Layout {
  version: number;
  segmentCount: number;
  segments: Array<{ idx: number; stock: number }>;
}

// One statement is one transaction: deduct from the segment if it holds q, insert the order from
// the deducted row, and always report what the segment has left.
const TAKE_FROM_SEGMENT_SQL = `
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

const INSERT_ORDER_SQL = `
  INSERT INTO orders (product_id, user_id, quantity, allocations) VALUES ($1, $2, $3, $4::jsonb)
  RETURNING id, created_at`;

@Injectable()
export class StockRepository {
  constructor(
    private readonly db: DataSource,
    @Inject(APP_CONFIG) private readonly config: ResolvedConfig,
    private readonly metrics: MetricsService,
  ) {}

  /**
   * Sells q units from one segment with the order insert, atomically. `holdInTxMs` > 0 keeps the
   * row locked that long inside the transaction (the no-Redis-lock peer of the benchmark).
   */
  async takeFromSegment(productId: number, idx: number, q: number, userId: string, holdInTxMs = 0): Promise<SegmentAttempt> {
    const order = (id: string, createdAt: Date): OrderRow => ({
      id: Number(id),
      productId,
      userId,
      quantity: q,
      allocations: [{ segment: idx, quantity: q }],
      createdAt,
    });
    return this.guard(async () => {
      if (holdInTxMs === 0) {
        const [row] = await this.db.query<Array<{
          id: string | null;
          created_at: Date | null;
          remaining: string | null;
        }>>(TAKE_FROM_SEGMENT_SQL, [productId, idx, q, userId]);
        const remaining = row.remaining === null ? null : Number(row.remaining);
        return row.id === null ? { remaining } : { order: order(row.id, row.created_at as Date), remaining };
      }
      return this.db.transaction(async (tx) => {
        const updated = await tx.query<[Array<{ stock: string }>, number]>(
          'UPDATE stock_segments SET stock = stock - $3::int WHERE product_id = $1 AND idx = $2 AND stock >= $3::int RETURNING stock',
          [productId, idx, q],
        );
        if (updated[1] === 0) {
          const [seg] = await tx.query<Array<{ stock: string }>>('SELECT stock FROM stock_segments WHERE product_id = $1 AND idx = $2', [productId, idx]);
          return { remaining: seg ? Number(seg.stock) : null };
        }
        await sleep(holdInTxMs);
        const [ins] = await this.insertOrder(tx, productId, userId, q, [{ segment: idx, quantity: q }]);
        return { order: order(ins.id, ins.created_at), remaining: Number(updated[0][0].stock) };
      });
    });
  }

  /**
   * Sells q units spread over several segments in one transaction, reading their stock under
   * row locks (ascending). Null when they no longer hold q between them.
   */
  async takeFromSegments(productId: number, indexes: number[], q: number, userId: string, holdInTxMs = 0): Promise<OrderRow | null> {
    return this.guard(() =>
      this.db.transaction(async (tx) => {
        const rows = await tx.query<Array<{ idx: number; stock: string }>>(
          'SELECT idx, stock FROM stock_segments WHERE product_id = $1 AND idx = ANY($2::int[]) ORDER BY idx FOR UPDATE',
          [productId, indexes],
        );
        const takes = takeFrom(q, rows.map((r) => ({ idx: r.idx, stock: Number(r.stock) })));
        if (!takes) return null;
        for (const t of takes) {
          await tx.query('UPDATE stock_segments SET stock = stock - $3::int WHERE product_id = $1 AND idx = $2 AND stock >= $3::int', [
            productId,
            t.segment,
            t.quantity,
          ]);
        }
        if (holdInTxMs > 0) await sleep(holdInTxMs);
        const [ins] = await this.insertOrder(tx, productId, userId, q, takes);
        return { id: Number(ins.id), productId, userId, quantity: q, allocations: takes, createdAt: ins.created_at };
      }),
    );
  }

  /** Whether the user already holds an order for the product (the unique index answers). */
  async hasOrder(productId: number, userId: string): Promise<boolean> {
    return this.guard(async () => {
      const rows = await this.db.query<unknown[]>('SELECT 1 FROM orders WHERE product_id = $1 AND user_id = $2', [productId, userId]);
      return rows.length > 0;
    });
  }

  /** The authoritative stock of a product: its layout version and every segment. */
  async readLayout(productId: number): Promise<Layout | null> {
    return this.guard(async () => {
      const rows = await this.db.query<Array<{ layout_version: number; segment_count: number; idx: number | null; stock: string | null }>>(
        `SELECT p.layout_version, p.segment_count, s.idx, s.stock
           FROM products p LEFT JOIN stock_segments s ON s.product_id = p.id
          WHERE p.id = $1 ORDER BY s.idx`,
        [productId],
      );
      if (rows.length === 0) return null;
      return {
        version: rows[0].layout_version,
        segmentCount: rows[0].segment_count,
        segments: rows.filter((r) => r.idx !== null).map((r) => ({ idx: r.idx as number, stock: Number(r.stock) })),
      };
    });
  }

  private insertOrder(tx: EntityManager, productId: number, userId: string, q: number, allocations: Allocation[]) {
    return tx.query<Array<{ id: string; created_at: Date }>>(INSERT_ORDER_SQL, [productId, userId, q, JSON.stringify(allocations)]);
  }

  private async guard<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (err) {
      const mapped = mapDatabaseError(err, this.config.retryAfterS);
      if (mapped !== err && (mapped as { code?: string }).code === 'UNAVAILABLE') this.metrics.dependencyErrors.inc({ dependency: 'postgres' });
      throw mapped;
    }
  }
}
