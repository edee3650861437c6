// Products and their stock layout: create (stock split evenly into N segments), view, change the
// sale's terms (PATCH), restock (new units filled into the smallest segments) and rebalance (every
// segment row locked, remaining units redistributed in one transaction).
import { Injectable, Logger } from '@nestjs/common';
import { DataSource, EntityManager } from 'typeorm';
import { DatabaseConfig, HttpConfig, InventoryConfig } from '../config/app-config';
import { mapDatabaseError } from '../common/database-errors';
import { DomainError, ProductNotFoundError, ValidationFailedError } from '../common/domain-errors';
import { MetricsService } from '../metrics/metrics.service';
import { ProductCatalogService } from './product-catalog.service';
import { evenSplit, fillEvenly } from './segment-plan';
import { SoldOutBoard } from './sold-out-board.service';
import { StockHintsService } from './stock-hints.service';

export interface ProductView {
  id: number;
  name: string;
  /** Units ever stocked: created plus restocked. */
  stocked: number;
  /** Units remaining in the segments. */
  stock: number;
  /** Units in live orders: reserved + paid. */
  sold: number;
  reserved: number;
  paid: number;
  limitPerUser: number;
  startsAt: Date | null;
  endsAt: Date | null;
  paymentTimeoutS: number;
  segmentCount: number;
  segments: Array<{ index: number; stock: number }>;
}

/** The terms of a sale: who may buy how much, when, and how long a reservation waits for payment. */
export interface SaleTerms {
  name: string;
  limitPerUser: number;
  startsAt: Date | null;
  endsAt: Date | null;
  paymentTimeoutS: number;
}

export interface NewProduct extends SaleTerms {
  stock: number;
  segments: number;
}

const DEFAULT_PAYMENT_TIMEOUT_S = 900;

/** endsAt must come after startsAt when both are set. */
function checkWindow(t: Pick<SaleTerms, 'startsAt' | 'endsAt'>): void {
  if (t.startsAt && t.endsAt && t.endsAt.getTime() <= t.startsAt.getTime()) {
    throw new ValidationFailedError(`endsAt (${t.endsAt.toISOString()}) must be after startsAt (${t.startsAt.toISOString()})`);
  }
}

@Injectable()
export class InventoryService {
  private readonly logger = new Logger(InventoryService.name);

  constructor(
    private readonly db: DataSource,
    private readonly inventory: InventoryConfig,
    private readonly database: DatabaseConfig,
    private readonly http: HttpConfig,
    private readonly hints: StockHintsService,
    private readonly catalog: ProductCatalogService,
    private readonly board: SoldOutBoard,
    private readonly metrics: MetricsService,
  ) {}

  async create(p: NewProduct): Promise<ProductView> {
    checkWindow(p);
    return this.guard(() =>
      this.db.transaction(async (tx) => {
        const [row] = await tx.query<Array<{ id: number }>>(
          `INSERT INTO products (name, total_stock, limit_per_user, segment_count, starts_at, ends_at, payment_timeout_s)
           VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`,
          [p.name, p.stock, p.limitPerUser, p.segments, p.startsAt, p.endsAt, p.paymentTimeoutS ?? DEFAULT_PAYMENT_TIMEOUT_S],
        );
        await this.writeSegments(tx, row.id, evenSplit(p.stock, p.segments));
        return this.viewIn(tx, row.id);
      }),
    );
  }

  async view(productId: number): Promise<ProductView> {
    return this.guard(() => this.viewIn(this.db.manager, productId));
  }

  /**
   * Changes the sale's terms; fields left out keep their value, a null window bound opens it. The
   * new terms hold in this process at once and in the others within PRODUCT_CACHE_MS; orders
   * already reserved keep their expiresAt.
   */
  async update(productId: number, change: Partial<SaleTerms>): Promise<ProductView> {
    const view = await this.guard(() =>
      this.db.transaction(async (tx) => {
        const before = await this.viewIn(tx, productId, 'FOR NO KEY UPDATE');
        const after: SaleTerms = { ...before, ...change };
        checkWindow(after);
        await tx.query('UPDATE products SET name = $2, limit_per_user = $3, starts_at = $4, ends_at = $5, payment_timeout_s = $6 WHERE id = $1', [
          productId,
          after.name,
          after.limitPerUser,
          after.startsAt,
          after.endsAt,
          after.paymentTimeoutS,
        ]);
        return this.viewIn(tx, productId);
      }),
    );
    this.catalog.forget(productId);
    return view;
  }

  /**
   * Adds units, filled into the smallest segments so that their sizes end as even as possible,
   * under the same row locks as a rebalance (bounded by REBALANCE_WAIT_MS: BUSY, nothing added).
   * The sold-out flag and the empty hints of the filled segments are cleared.
   */
  async restock(productId: number, units: number): Promise<ProductView> {
    const result = await this.guard(() =>
      this.db.transaction(async (tx) => {
        await this.boundLockWaits(tx);
        const [product] = await tx.query<Array<{ layout_version: number }>>('SELECT layout_version FROM products WHERE id = $1 FOR NO KEY UPDATE', [productId]);
        if (!product) throw new ProductNotFoundError(productId);
        const segs = await tx.query<Array<{ idx: number; stock: string }>>(
          'SELECT idx, stock FROM stock_segments WHERE product_id = $1 ORDER BY idx FOR UPDATE',
          [productId],
        );
        const adds = fillEvenly(
          segs.map((r) => Number(r.stock)),
          units,
        );
        const filled = segs.map((r, i) => ({ idx: r.idx, add: adds[i] })).filter((f) => f.add > 0);
        await tx.query(
          `UPDATE stock_segments s SET stock = s.stock + v.add FROM unnest($2::int[], $3::bigint[]) AS v(idx, add)
            WHERE s.product_id = $1 AND s.idx = v.idx`,
          [productId, filled.map((f) => f.idx), filled.map((f) => f.add)],
        );
        await tx.query('UPDATE products SET total_stock = total_stock + $2 WHERE id = $1', [productId, units]);
        return { view: await this.viewIn(tx, productId), layoutVersion: product.layout_version, filled: filled.map((f) => f.idx) };
      }),
    );
    this.metrics.restockedUnits.inc(units);
    this.board.forget(productId);
    await this.hints.stockReturned(productId, result.layoutVersion, result.filled).catch(() => this.metrics.dependencyErrors.inc({ dependency: 'redis' }));
    this.logger.log(`restocked product ${productId} with ${units} units: ${result.view.stock} remaining`);
    return result.view;
  }

  /**
   * Locks every segment and redistributes the remaining units evenly over `segments` (default:
   * the current count), in one PostgreSQL transaction.
   *
   * The segment locks taken here are PostgreSQL's row locks (SELECT ... FOR UPDATE, ascending),
   * not the Redis segment locks: under a full order load a rebalancer that must win N Redis lock
   * races one after the other is starved, and every segment it already holds stalls the sale
   * (the concurrency test saw orders time out with BUSY that way). Row locks are exact and
   * short: in-flight deductions finish first, new ones wait the few milliseconds of this
   * transaction and then re-check `stock >= q` against the moved stock. Orders that still use
   * the old layout find removed segments gone and re-read the layout before any SOLD_OUT.
   */
  async rebalance(productId: number, segments?: number): Promise<{ before: ProductView; after: ProductView }> {
    const result = await this.guard(() =>
      this.db.transaction(async (tx) => {
        await this.boundLockWaits(tx);
        // NO KEY UPDATE: order inserts hold KEY SHARE on the product (foreign key) while they hold a
        // segment row; a plain FOR UPDATE here would deadlock with them. Returns of units hold it
        // FOR SHARE, so no return runs while segments are rewritten.
        const [product] = await tx.query<
          Array<{
            layout_version: number;
            segment_count: number;
          }>
        >('SELECT layout_version, segment_count FROM products WHERE id = $1 FOR NO KEY UPDATE', [productId]);
        if (!product) throw new ProductNotFoundError(productId);
        const target = segments ?? product.segment_count;
        await tx.query('SELECT idx FROM stock_segments WHERE product_id = $1 ORDER BY idx FOR UPDATE', [productId]);
        const before = await this.viewIn(tx, productId);
        await tx.query('DELETE FROM stock_segments WHERE product_id = $1 AND idx >= $2', [productId, target]);
        await this.writeSegments(tx, productId, evenSplit(before.stock, target));
        await tx.query('UPDATE products SET segment_count = $2, layout_version = layout_version + 1 WHERE id = $1', [productId, target]);
        return { before, after: await this.viewIn(tx, productId), oldVersion: product.layout_version };
      }),
    );
    this.metrics.rebalances.inc();
    this.catalog.forget(productId);
    this.board.forget(productId);
    await this.hints.forgetLayout(productId, result.oldVersion).catch(() => undefined);
    this.logger.log(`rebalanced product ${productId}: ${result.before.segmentCount} -> ${result.after.segmentCount} segments, ${result.after.stock} units`);
    return { before: result.before, after: result.after };
  }

  /** Waiting longer than REBALANCE_WAIT_MS for a row lock fails with 55P03, answered as BUSY. */
  private async boundLockWaits(tx: EntityManager): Promise<void> {
    await tx.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.min(this.inventory.rebalanceWaitMs, this.database.timeoutMs - 100))}`);
  }

  private async writeSegments(tx: EntityManager, productId: number, sizes: number[]): Promise<void> {
    await tx.query(
      `INSERT INTO stock_segments (product_id, idx, stock)
       SELECT $1, i - 1, s FROM unnest($2::bigint[]) WITH ORDINALITY AS t(s, i)
       ON CONFLICT (product_id, idx) DO UPDATE SET stock = EXCLUDED.stock`,
      [productId, sizes],
    );
  }

  private async viewIn(m: EntityManager, productId: number, lock = ''): Promise<ProductView> {
    const [p] = await m.query<
      Array<{
        id: number;
        name: string;
        total_stock: string;
        limit_per_user: number;
        segment_count: number;
        starts_at: Date | null;
        ends_at: Date | null;
        payment_timeout_s: number;
      }>
    >(
      `SELECT id, name, total_stock, limit_per_user, segment_count, starts_at, ends_at, payment_timeout_s
         FROM products WHERE id = $1 ${lock}`,
      [productId],
    );
    if (!p) throw new ProductNotFoundError(productId);
    const segs = await m.query<
      Array<{
        idx: number;
        stock: string;
      }>
    >('SELECT idx, stock FROM stock_segments WHERE product_id = $1 ORDER BY idx', [productId]);
    const [live] = await m.query<Array<{ reserved: string; paid: string }>>(
      `SELECT COALESCE(sum(quantity) FILTER (WHERE status = 'reserved'), 0) AS reserved, COALESCE(sum(quantity) FILTER (WHERE status = 'paid'), 0) AS paid
         FROM orders WHERE product_id = $1 AND status IN ('reserved', 'paid')`,
      [productId],
    );
    const segments = segs.map((s) => ({ index: s.idx, stock: Number(s.stock) }));
    const reserved = Number(live.reserved);
    const paid = Number(live.paid);
    return {
      id: p.id,
      name: p.name,
      stocked: Number(p.total_stock),
      stock: segments.reduce((sum, s) => sum + s.stock, 0),
      sold: reserved + paid,
      reserved,
      paid,
      limitPerUser: p.limit_per_user,
      startsAt: p.starts_at,
      endsAt: p.ends_at,
      paymentTimeoutS: p.payment_timeout_s,
      segmentCount: p.segment_count,
      segments,
    };
  }

  private async guard<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (err) {
      if (err instanceof DomainError) throw err;
      throw mapDatabaseError(err, this.http.retryAfterS);
    }
  }
}
