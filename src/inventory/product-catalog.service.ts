// What the order path needs to know of a product, cached in this process for PRODUCT_CACHE_MS.
// A stale layout is safe: it only leads to an authoritative read, which refreshes it. A changed
// limit or sale window (PATCH) reaches the other processes within PRODUCT_CACHE_MS.
import { Injectable } from '@nestjs/common';
import { InventoryConfig } from '../config/app-config';
import { ProductNotFoundError } from '../common/domain-errors';
import { ProductInfo } from './product.types';
import { ProductsRepository } from './products.repository';

@Injectable()
export class ProductCatalogService {
  private readonly cache = new Map<number, { info: ProductInfo; until: number }>();
  /** Reads in flight: every call that finds the entry stale meanwhile waits for the same read. */
  private readonly reading = new Map<number, Promise<ProductInfo>>();

  constructor(
    private readonly products: ProductsRepository,
    private readonly inventory: InventoryConfig,
  ) {}

  /** The product, or ProductNotFoundError. Unknown ids are never cached, so a new product shows at once. */
  async get(productId: number): Promise<ProductInfo> {
    const hit = this.cache.get(productId);
    if (hit && hit.until > Date.now()) return hit.info;
    // One read per product at a time: under a crowd, the moment an entry lapses hundreds of calls
    // find it stale at once, and each would otherwise read the same row for itself.
    const running = this.reading.get(productId);
    if (running) return running;
    const read: Promise<ProductInfo> = this.products
      .readTerms(productId)
      .then((info) => {
        if (!info) throw new ProductNotFoundError(productId);
        // Forgotten meanwhile (the product changed): this caller gets what was read, the cache keeps none of it.
        return this.reading.get(productId) === read ? this.remember(info) : info;
      })
      .finally(() => {
        if (this.reading.get(productId) === read) this.reading.delete(productId);
      });
    this.reading.set(productId, read);
    return read;
  }

  /** The cached product while it is fresh, without asking PostgreSQL; else undefined. */
  peek(productId: number): ProductInfo | undefined {
    const hit = this.cache.get(productId);
    return hit && hit.until > Date.now() ? hit.info : undefined;
  }

  remember(info: ProductInfo): ProductInfo {
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(info.id, { info, until: Date.now() + this.inventory.productCacheMs });
    return info;
  }

  forget(productId: number): void {
    this.cache.delete(productId);
    this.reading.delete(productId);
  }
}
