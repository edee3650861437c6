// Products and their stock layout: create (stock split evenly into N segments), view, and
// rebalance (every segment row locked, remaining units redistributed in one transaction).
import { Injectable, Logger } from '@nestjs/common';
import { DataSource, EntityManager } from 'typeorm';
import { DatabaseConfig, HttpConfig, InventoryConfig } from '../config/app-config';
import { mapDatabaseError } from '../common/database-errors';
import { DomainError, ProductNotFoundError } from '../common/domain-errors';
import { MetricsService } from '../metrics/metrics.service';
import { ProductCatalogService } from './product-catalog.service';
import { evenSplit } from './segment-plan';
import { StockHintsService } from './stock-hints.service';

export interface ProductView {
  id: number;
  name: string;
  stock: number;
  sold: number;
  limitPerUser: number;
  segmentCount: number;
  segments: Array<{ index: number; stock: number }>;
}

export interface NewProduct {
  name: string;
  stock: number;
  segments: number;
  limitPerUser: number;
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
    private readonly metrics: MetricsService,
  ) {}

  async create(p: NewProduct): Promise<ProductView> {
    return this.guard(() =>
      this.db.transaction(async (tx) => {
        const [row] = await tx.query<Array<{ id: number }>>(
          `INSERT INTO products (name, total_stock, limit_per_user, segment_count) VALUES ($1, $2, $3, $4) RETURNING id`,
          [p.name, p.stock, p.limitPerUser, p.segments],
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
        // Waiting longer than REBALANCE_WAIT_MS for a row lock fails with 55P03, answered as BUSY.
        await tx.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.min(this.inventory.rebalanceWaitMs, this.database.timeoutMs - 100))}`);
        // NO KEY UPDATE: order inserts hold KEY SHARE on the product (foreign key) while they hold a
        // segment row; a plain FOR UPDATE here would deadlock with them.
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
    await this.hints.forgetLayout(productId, result.oldVersion).catch(() => undefined);
    this.logger.log(`rebalanced product ${productId}: ${result.before.segmentCount} -> ${result.after.segmentCount} segments, ${result.after.stock} units`);
    return { before: result.before, after: result.after };
  }

  private async writeSegments(tx: EntityManager, productId: number, sizes: number[]): Promise<void> {
    await tx.query(
      `INSERT INTO stock_segments (product_id, idx, stock)
       SELECT $1, i - 1, s FROM unnest($2::bigint[]) WITH ORDINALITY AS t(s, i)
       ON CONFLICT (product_id, idx) DO UPDATE SET stock = EXCLUDED.stock`,
      [productId, sizes],
    );
  }

  private async viewIn(m: EntityManager, productId: number): Promise<ProductView> {
    const [p] = await m.query<Array<{ id: number; name: string; limit_per_user: number; segment_count: number; sold: string }>>(
      `SELECT p.id, p.name, p.limit_per_user, p.segment_count,
              (SELECT COALESCE(sum(quantity), 0) FROM orders o WHERE o.product_id = p.id) AS sold
         FROM products p WHERE p.id = $1`,
      [productId],
    );
    if (!p) throw new ProductNotFoundError(productId);
    const segs = await m.query<
      Array<{
        idx: number;
        stock: string;
      }>
    >('SELECT idx, stock FROM stock_segments WHERE product_id = $1 ORDER BY idx', [productId]);
    const segments = segs.map((s) => ({ index: s.idx, stock: Number(s.stock) }));
    return {
      id: p.id,
      name: p.name,
      stock: segments.reduce((sum, s) => sum + s.stock, 0),
      sold: Number(p.sold),
      limitPerUser: p.limit_per_user,
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
