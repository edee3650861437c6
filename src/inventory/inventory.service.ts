// Products and their stock layout: create (stock split evenly into N segments), view, change the
// sale's terms (PATCH), restock (new units filled into the smallest segments) and rebalance (every
// segment row locked, remaining units redistributed in one transaction). The SQL is
// ProductsRepository's; here are the rules around it and what else must learn of a change: the
// product cache, the sold-out board, the Redis hints and the metrics.
import { Injectable, Logger } from '@nestjs/common';
import { ValidationFailedError } from '../common/domain-errors';
import { MetricsService } from '../metrics/metrics.service';
import { ProductCatalogService } from './product-catalog.service';
import { NewProduct, ProductView, SaleTerms } from './product.types';
import { ProductsRepository } from './products.repository';
import { SoldOutBoardService } from './sold-out-board.service';
import { StockHintsService } from './stock-hints.service';

/** endsAt must come after startsAt when both are set. */
function checkWindow(t: Pick<SaleTerms, 'startsAt' | 'endsAt'>): void {
  if (t.startsAt && t.endsAt && t.endsAt.getTime() <= t.startsAt.getTime()) {
    throw new ValidationFailedError(
      `endsAt (${t.endsAt.toISOString()}) must be after startsAt (${t.startsAt.toISOString()})`,
    );
  }
}

@Injectable()
export class InventoryService {
  private readonly logger = new Logger(InventoryService.name);

  constructor(
    private readonly products: ProductsRepository,
    private readonly hints: StockHintsService,
    private readonly catalog: ProductCatalogService,
    private readonly board: SoldOutBoardService,
    private readonly metrics: MetricsService,
  ) {}

  async create(p: NewProduct): Promise<ProductView> {
    checkWindow(p);
    return this.products.create(p);
  }

  async view(productId: number): Promise<ProductView> {
    return this.products.view(productId);
  }

  /**
   * Changes the sale's terms; fields left out keep their value, a null window bound opens it. The
   * new terms hold in this process at once and in the others within PRODUCT_CACHE_MS; orders
   * already reserved keep their expiresAt.
   */
  async update(productId: number, change: Partial<SaleTerms>): Promise<ProductView> {
    const view = await this.products.updateTerms(productId, (before) => {
      const after: SaleTerms = { ...before, ...change };
      checkWindow(after);
      return after;
    });
    this.catalog.forget(productId);
    return view;
  }

  /**
   * Adds units, filled into the smallest segments so that their sizes end as even as possible,
   * under the same row locks as a rebalance (bounded by REBALANCE_WAIT_MS: BUSY, nothing added).
   * The sold-out flag and the empty hints of the filled segments are cleared.
   */
  async restock(productId: number, units: number): Promise<ProductView> {
    const result = await this.products.restock(productId, units);
    this.metrics.restockedUnits.inc(units);
    this.board.forget(productId);
    await this.hints
      .stockReturned(productId, result.layoutVersion, result.filled)
      .catch(() => this.metrics.dependencyErrors.inc({ dependency: 'redis' }));
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
    const result = await this.products.rebalance(productId, segments);
    this.metrics.rebalances.inc();
    this.catalog.forget(productId);
    this.board.forget(productId);
    await this.hints.forgetLayout(productId, result.oldVersion).catch(() => undefined);
    this.logger.log(
      `rebalanced product ${productId}: ${result.before.segmentCount} -> ${result.after.segmentCount} segments, ${result.after.stock} units`,
    );
    return { before: result.before, after: result.after };
  }
}
