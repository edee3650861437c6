// The authoritative read of a product's stock layout, and the reads behind the sold-out board
// (sold-out-board.service.ts). The SQL that sells (deduct and insert the order) belongs to the
// orders module (orders/repositories/sale-writes.repository.ts), which builds on this module; this
// module never imports it.
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { HttpConfig } from '../config/app-config';
import { mappedFailure } from '../database/mapped-failure';
import { MetricsService } from '../metrics/metrics.service';
import { ProductInfo } from './product.types';
import { PRODUCT_TERMS_COLUMNS, ProductTermsRow, toProductInfo } from './products.repository';

export interface Layout {
  version: number;
  segmentCount: number;
  segments: Array<{ idx: number; stock: number }>;
}

/**
 * A product as the sold-out board sees it: units left and a fingerprint of its segment rows (each
 * row's index and xmin, the transaction that last wrote it). Every sale, return, restock and
 * rebalance writes a segment row, so an unchanged fingerprint means nothing was sold or returned.
 */
export interface StockFingerprint {
  remaining: number;
  fingerprint: string;
}

/** The board's poll of one product: its fingerprint and its current terms (to keep the catalog fresh). */
export interface PolledProduct extends StockFingerprint {
  terms: ProductInfo;
}

/**
 * The same, with who holds the product's live orders (`holders` only when nothing remains), and the
 * layout's version and the segments with stock (what a stale sold-out flag is cleared with).
 */
export interface SoldOutSnapshot extends StockFingerprint {
  holders: Array<[userId: string, orderId: number]> | null;
  layoutVersion: number;
  withStock: number[];
}

const FINGERPRINT_COLUMNS = `coalesce(sum(stock), 0)::text AS remaining, coalesce(string_agg(idx || ':' || xmin::text, ',' ORDER BY idx), '') AS fingerprint`;

@Injectable()
export class StockRepository {
  constructor(
    private readonly db: DataSource,
    private readonly http: HttpConfig,
    private readonly metrics: MetricsService,
  ) {}

  /** The authoritative stock of a product: its layout version and every segment. */
  async readLayout(productId: number): Promise<Layout | null> {
    const rows = await this.guarded(() =>
      this.db.query<Array<{ layout_version: number; segment_count: number; idx: number | null; stock: string | null }>>(
        `SELECT p.layout_version, p.segment_count, s.idx, s.stock
           FROM products p LEFT JOIN stock_segments s ON s.product_id = p.id
          WHERE p.id = $1 ORDER BY s.idx`,
        [productId],
      ),
    );
    if (rows.length === 0) return null;
    return {
      version: rows[0].layout_version,
      segmentCount: rows[0].segment_count,
      segments: rows.filter((r) => r.idx !== null).map((r) => ({ idx: r.idx as number, stock: Number(r.stock) })),
    };
  }

  /**
   * One statement, so one snapshot: the holders are exactly those of the stock it read (no order
   * can be made or returned between the two reads). Null for a product without segments.
   */
  async soldOutSnapshot(productId: number): Promise<SoldOutSnapshot | null> {
    const rows = await this.guarded(() =>
      this.db.query<
        Array<{
          remaining: string;
          fingerprint: string;
          layout_version: number;
          with_stock: number[];
          holders: Array<[string, string | number]> | null;
        }>
      >(
        `WITH seg AS (SELECT ${FINGERPRINT_COLUMNS},
                             coalesce(array_agg(idx ORDER BY idx) FILTER (WHERE stock > 0), '{}') AS with_stock
                        FROM stock_segments WHERE product_id = $1)
         SELECT seg.remaining, seg.fingerprint, seg.with_stock, p.layout_version,
                CASE WHEN seg.remaining = '0' THEN
                  (SELECT coalesce(json_agg(json_build_array(o.user_id, o.id)), '[]'::json)
                     FROM orders o WHERE o.product_id = $1 AND o.status IN ('reserved', 'paid'))
                END AS holders
           FROM seg JOIN products p ON p.id = $1`,
        [productId],
      ),
    );
    const r = rows[0];
    if (!r || r.fingerprint === '') return null;
    return {
      remaining: Number(r.remaining),
      fingerprint: r.fingerprint,
      layoutVersion: r.layout_version,
      withStock: r.with_stock,
      holders: r.holders?.map(([u, id]) => [u, Number(id)]) ?? null,
    };
  }

  /**
   * The fingerprints of several products at once, with their terms (the board's poll, one
   * statement; tagged so that a count of statements can tell it apart). A product that no longer
   * exists is absent.
   */
  async fingerprints(productIds: number[]): Promise<Map<number, PolledProduct>> {
    const terms = PRODUCT_TERMS_COLUMNS.split(', ')
      .map((c) => `p.${c}`)
      .join(', ');
    const rows = await this.guarded(() =>
      this.db.query<Array<ProductTermsRow & { remaining: string; fingerprint: string }>>(
        `/* sold-out board poll */
         SELECT ${terms}, coalesce(sum(s.stock), 0)::text AS remaining,
                coalesce(string_agg(s.idx || ':' || s.xmin::text, ',' ORDER BY s.idx), '') AS fingerprint
           FROM products p LEFT JOIN stock_segments s ON s.product_id = p.id
          WHERE p.id = ANY($1::int[]) GROUP BY p.id`,
        [productIds],
      ),
    );
    return new Map(
      rows.map((r) => [r.id, { remaining: Number(r.remaining), fingerprint: r.fingerprint, terms: toProductInfo(r) }]),
    );
  }

  private async guarded<T>(read: () => Promise<T>): Promise<T> {
    try {
      return await read();
    } catch (err) {
      throw mappedFailure(err, this.http.retryAfterS, this.metrics);
    }
  }
}
