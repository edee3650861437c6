// Products and their stock layout: create (stock split evenly into N segments), view, and
// rebalance (every segment locked, remaining units redistributed in one transaction).
import { Inject, Injectable, Logger } from '@nestjs/common';
import { DataSource, EntityManager } from 'typeorm';
import { APP_CONFIG, ResolvedConfig } from '../config/app-config';
import { mapDatabaseError } from '../common/database-errors';
import { DomainError, ProductNotFoundError } from '../common/domain-errors';
import { HeldLock, LockService } from '../locks/lock.service';
import { MetricsService } from '../metrics/metrics.service';
import { lockKeys } from '../locks/lock-keys';
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
    @Inject(APP_CONFIG) private readonly config: ResolvedConfig,
    private readonly locks: LockService,
    private readonly hints: StockHintsService,
    private readonly catalog: ProductCatalogService,
    private readonly metrics: MetricsService,
  ) {}

  async create(p: NewProduct): Promise<ProductView> {
    return this.guard(() =>
      this.db.transaction(async (tx) => {
        const [row] = (await tx.query(
          `INSERT INTO products (name, total_stock, limit_per_user, segment_count) VALUES ($1, $2, $3, $4) RETURNING id`,
          [p.name, p.stock, p.limitPerUser, p.segments],
        )) as Array<{ id: number }>;
        await this.writeSegments(tx, row.id, evenSplit(p.stock, p.segments));
        return this.viewIn(tx, row.id);
      }),
    );
  }

  async view(productId: number): Promise<ProductView> {
    return this.guard(() => this.viewIn(this.db.manager, productId));
  }

  /**
   * Locks every segment (ascending, waiting up to REBALANCE_WAIT_MS for each), then in one
   * transaction redistributes the remaining units evenly over `segments` (default: the current
   * count). Orders keep flowing to the segments not yet locked; PostgreSQL row locks make the
   * move exact even for an order whose Redis lock was lost.
   */
  async rebalance(productId: number, segments?: number): Promise<{ before: ProductView; after: ProductView }> {
    const current = await this.view(productId);
    const target = segments ?? current.segmentCount;
    const held: HeldLock[] = [];
    try {
      if (this.config.stockLocking === 'redlock') {
        const count = Math.max(current.segmentCount, target);
        for (let idx = 0; idx < count; idx++) {
          held.push(await this.locks.acquireWithin(lockKeys.segment(productId, idx), this.config.lockTtlMs, this.config.rebalanceWaitMs));
        }
      }
      const result = await this.guard(() =>
        this.db.transaction(async (tx) => {
          const [product] = (await tx.query('SELECT layout_version FROM products WHERE id = $1 FOR UPDATE', [productId])) as Array<{ layout_version: number }>;
          if (!product) throw new ProductNotFoundError(productId);
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
      this.logger.log(`rebalanced product ${productId}: ${result.before.segmentCount} -> ${target} segments, ${result.after.stock} units`);
      return { before: result.before, after: result.after };
    } finally {
      await Promise.all(held.map((h) => this.locks.release(h)));
    }
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
    const [p] = (await m.query(
      `SELECT p.id, p.name, p.limit_per_user, p.segment_count,
              (SELECT COALESCE(sum(quantity), 0) FROM orders o WHERE o.product_id = p.id) AS sold
         FROM products p WHERE p.id = $1`,
      [productId],
    )) as Array<{ id: number; name: string; limit_per_user: number; segment_count: number; sold: string }>;
    if (!p) throw new ProductNotFoundError(productId);
    const segs = (await m.query('SELECT idx, stock FROM stock_segments WHERE product_id = $1 ORDER BY idx', [productId])) as Array<{
      idx: number;
      stock: string;
    }>;
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
      throw mapDatabaseError(err, this.config.retryAfterS);
    }
  }
}
