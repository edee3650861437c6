// What the order path needs to know of a product, cached in this process for PRODUCT_CACHE_MS.
// A stale layout is safe: it only leads to an authoritative read, which refreshes it. A changed
// limit or sale window (PATCH) reaches the other processes within PRODUCT_CACHE_MS.
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { HttpConfig, InventoryConfig } from '../config/app-config';
import { mapDatabaseError } from '../common/database-errors';
import { ProductNotFoundError } from '../common/domain-errors';

export interface ProductInfo {
  id: number;
  limitPerUser: number;
  segmentCount: number;
  layoutVersion: number;
  /** The sale window, epoch ms; null for open. */
  startsAt: number | null;
  endsAt: number | null;
}

/** The products columns the order path reads, as PostgreSQL returns them. */
export interface ProductTermsRow {
  id: number;
  limit_per_user: number;
  segment_count: number;
  layout_version: number;
  starts_at: Date | null;
  ends_at: Date | null;
}
export const PRODUCT_TERMS_COLUMNS = 'id, limit_per_user, segment_count, layout_version, starts_at, ends_at';

export function toProductInfo(r: ProductTermsRow): ProductInfo {
  return {
    id: r.id,
    limitPerUser: r.limit_per_user,
    segmentCount: r.segment_count,
    layoutVersion: r.layout_version,
    startsAt: r.starts_at?.getTime() ?? null,
    endsAt: r.ends_at?.getTime() ?? null,
  };
}

@Injectable()
export class ProductCatalogService {
  private readonly cache = new Map<number, { info: ProductInfo; until: number }>();

  constructor(
    private readonly db: DataSource,
    private readonly http: HttpConfig,
    private readonly inventory: InventoryConfig,
  ) {}

  /** The product, or ProductNotFoundError. Unknown ids are never cached, so a new product shows at once. */
  async get(productId: number): Promise<ProductInfo> {
    const hit = this.cache.get(productId);
    if (hit && hit.until > Date.now()) return hit.info;
    let rows: ProductTermsRow[];
    try {
      rows = await this.db.query(`SELECT ${PRODUCT_TERMS_COLUMNS} FROM products WHERE id = $1`, [productId]);
    } catch (err) {
      throw mapDatabaseError(err, this.http.retryAfterS);
    }
    if (rows.length === 0) throw new ProductNotFoundError(productId);
    return this.remember(toProductInfo(rows[0]));
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
