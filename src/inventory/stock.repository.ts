// The authoritative read of a product's stock layout. The SQL that sells (deduct and insert the
// order) belongs to the orders module (orders/orders.repository.ts); this module never imports it.
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { HttpConfig } from '../config/app-config';
import { mapDatabaseError } from '../common/database-errors';
import { UnavailableError } from '../common/domain-errors';
import { MetricsService } from '../metrics/metrics.service';

export interface Layout {
  version: number;
  segmentCount: number;
  segments: Array<{ idx: number; stock: number }>;
}

@Injectable()
export class StockRepository {
  constructor(
    private readonly db: DataSource,
    private readonly http: HttpConfig,
    private readonly metrics: MetricsService,
  ) {}

  /** The authoritative stock of a product: its layout version and every segment. */
  async readLayout(productId: number): Promise<Layout | null> {
    let rows: Array<{ layout_version: number; segment_count: number; idx: number | null; stock: string | null }>;
    try {
      rows = await this.db.query<typeof rows>(
        `SELECT p.layout_version, p.segment_count, s.idx, s.stock
           FROM products p LEFT JOIN stock_segments s ON s.product_id = p.id
          WHERE p.id = $1 ORDER BY s.idx`,
        [productId],
      );
    } catch (err) {
      const mapped = mapDatabaseError(err, this.http.retryAfterS);
      if (mapped instanceof UnavailableError) this.metrics.dependencyErrors.inc({ dependency: 'postgres' });
      throw mapped;
    }
    if (rows.length === 0) return null;
    return {
      version: rows[0].layout_version,
      segmentCount: rows[0].segment_count,
      segments: rows.filter((r) => r.idx !== null).map((r) => ({ idx: r.idx as number, stock: Number(r.stock) })),
    };
  }
}
