// Reading orders: by id (GET /orders/:id) and by their key, the user's live order of a product
// (to tell a client that retries after a lost answer which order it already has).
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { HttpConfig } from '../../config/app-config';
import { mappedFailure } from '../../database/mapped-failure';
import { MetricsService } from '../../metrics/metrics.service';
import { OrderRow } from '../order.types';
import { LIVE, ORDER_COLUMNS, OrderRecord, toOrderRow } from './order-sql';

@Injectable()
export class OrderReadsRepository {
  constructor(
    private readonly db: DataSource,
    private readonly http: HttpConfig,
    private readonly metrics: MetricsService,
  ) {}

  async findById(id: string): Promise<OrderRow | null> {
    try {
      const rows = await this.db.query<OrderRecord[]>(`SELECT ${ORDER_COLUMNS} FROM orders WHERE id = $1`, [id]);
      return rows.length === 0 ? null : toOrderRow(rows[0]);
    } catch (err) {
      throw mappedFailure(err, this.http.retryAfterS, this.metrics);
    }
  }

  /** The user's live order of the product, if any (the partial unique index orders_one_live_per_user answers). */
  async findByKey(productId: number, userId: string): Promise<OrderRow | null> {
    try {
      const rows = await this.db.query<OrderRecord[]>(
        `SELECT ${ORDER_COLUMNS} FROM orders WHERE product_id = $1 AND user_id = $2 AND ${LIVE}`,
        [productId, userId],
      );
      return rows.length === 0 ? null : toOrderRow(rows[0]);
    } catch (err) {
      throw mappedFailure(err, this.http.retryAfterS, this.metrics);
    }
  }
}
