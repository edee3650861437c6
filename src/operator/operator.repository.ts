// What the operator page reads from PostgreSQL each second: the newest products with their
// segments and waiting rooms (no scan of orders: sold is stocked minus what the segments hold).
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

export interface ProductGlance {
  id: number;
  name: string;
  stocked: number;
  stock: number;
  sold: number;
  segmentCount: number;
  segments: Array<{ index: number; stock: number }>;
  startsAt: string | null;
  endsAt: string | null;
  waitingRoom: boolean;
  /** Queue positions handed out and admitted so far (waiting rooms only). */
  queue: { positions: number; admitted: number } | null;
}

@Injectable()
export class OperatorRepository {
  constructor(private readonly db: DataSource) {}

  async products(limit: number): Promise<ProductGlance[]> {
    const rows: Array<{
      id: number;
      name: string;
      total_stock: string;
      segment_count: number;
      starts_at: Date | null;
      ends_at: Date | null;
      waiting_room: boolean;
      segments: Array<{ index: number; stock: number }> | null;
      high_water: string | null;
      admitted_through: string | null;
    }> = await this.db.query(
      `SELECT p.id, p.name, p.total_stock, p.segment_count, p.starts_at, p.ends_at, p.waiting_room,
              (SELECT json_agg(json_build_object('index', s.idx, 'stock', s.stock) ORDER BY s.idx)
                 FROM stock_segments s WHERE s.product_id = p.id) AS segments,
              w.high_water, w.admitted_through
         FROM products p LEFT JOIN waiting_rooms w ON w.product_id = p.id
        ORDER BY p.id DESC LIMIT $1`,
      [limit],
    );
    return rows.map((r) => {
      const segments = r.segments ?? [];
      const stock = segments.reduce((n, s) => n + Number(s.stock), 0);
      return {
        id: r.id,
        name: r.name,
        stocked: Number(r.total_stock),
        stock,
        sold: Number(r.total_stock) - stock,
        segmentCount: r.segment_count,
        segments: segments.map((s) => ({ index: s.index, stock: Number(s.stock) })),
        startsAt: r.starts_at?.toISOString() ?? null,
        endsAt: r.ends_at?.toISOString() ?? null,
        waitingRoom: r.waiting_room,
        queue:
          r.waiting_room && r.high_water !== null
            ? { positions: Number(r.high_water), admitted: Number(r.admitted_through) }
            : null,
      };
    });
  }
}
