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

  constructor(
    private readonly products: ProductsRepository,
    private readonly inventory: InventoryConfig,
  ) {}

  /** The product, or ProductNotFoundError. Unknown ids are never cached, so a new product shows at once. */
  async get(productId: number): Promise<ProductInfo> {
    const hit = this.cache.get(productId);
    if (hit && hit.until > Date.now()) return hit.info;
    const info = await this.products.readTerms(productId);
    if (!info) throw new ProductNotFoundError(productId);
    return this.remember(info);
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
  }
}
