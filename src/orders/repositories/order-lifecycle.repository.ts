// An order's life after the sale: pay, cancel (its units back in the same transaction), and the
// expiry sweep's statements. Each change is conditional on the order's state in PostgreSQL at that
// moment, so a race with another change or with the sweep ends in one winner; a change whose reply
// was lost is settled by OutcomesRepository.settleChange.
import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { DataSource, QueryRunner } from 'typeorm';
import { HttpConfig } from '../../config/app-config';
import { writeFailure } from '../../common/database-errors';
import {
  BusyError,
  OrderCancelledError,
  OrderExpiredError,
  OrderNotFoundError,
  OrderPaidError,
} from '../../common/domain-errors';
import { inTransaction, Updated } from '../../database/transactions';
import { mappedFailure } from '../../database/mapped-failure';
import { MetricsService } from '../../metrics/metrics.service';
import { Allocation, Expired, OrderRow, ReturnedUnits } from '../order.types';
import { ORDER_COLUMNS, OrderRecord, tagged, toOrderRow } from './order-sql';
import { OutcomesRepository, UncertainChange } from './outcomes.repository';
import { lockProductForReturns, returnUnits } from './unit-returns';

@Injectable()
export class OrderLifecycleRepository {
  constructor(
    private readonly db: DataSource,
    private readonly http: HttpConfig,
    private readonly metrics: MetricsService,
    private readonly outcomes: OutcomesRepository,
  ) {}

  /**
   * Pays a reserved order, in one statement: PostgreSQL decides at that moment whether the
   * reservation still runs (`expires_at > now()`), so a payment can never land on an order whose
   * units the sweep returned or is returning. Paying a paid order answers it unchanged.
   */
  async pay(orderId: string, userId: string): Promise<{ order: OrderRow; changed: boolean }> {
    const tag = randomUUID();
    let rows: OrderRecord[];
    try {
      [rows] = await this.db.query<Updated<OrderRecord>>(
        tagged(
          tag,
          `UPDATE orders SET status = 'paid', paid_at = now()
            WHERE id = $1 AND user_id = $2 AND status = 'reserved' AND expires_at > now()
           RETURNING ${ORDER_COLUMNS}`,
        ),
        [orderId, userId],
      );
    } catch (err) {
      if (writeFailure(err) !== 'unknown') throw this.mapped(err);
      const order = await this.outcomes.settleChange(new UncertainChange(tag, err), orderId, userId, (r) =>
        r.status === 'paid' ? r : refusePay(r),
      );
      return { order, changed: true };
    }
    if (rows.length > 0) return { order: toOrderRow(rows[0]), changed: true };
    const found = await this.findOwned(orderId, userId);
    if (found.status === 'paid') return { order: toOrderRow(found), changed: false };
    return refusePay(found) ?? this.unchangedYet(found);
  }

  /**
   * Cancels a reserved order and puts its units back in the same transaction (see returnUnits).
   * Cancelling a cancelled order answers it unchanged. A reservation past its expiresAt is
   * expired, not cancelled: 409 ORDER_EXPIRED, and the sweep returns its units.
   */
  async cancel(orderId: string, userId: string): Promise<{ order: OrderRow; returned: ReturnedUnits | null }> {
    const tag = randomUUID();
    const decide = (r: OrderRecord & { open?: boolean }): OrderRow | null => {
      if (r.status === 'cancelled') return toOrderRow(r);
      if (r.status === 'paid') throw new OrderPaidError(Number(r.id));
      if (r.status === 'expired' || r.open === false) throw new OrderExpiredError(Number(r.id));
      return null;
    };
    try {
      return await this.inTransaction(
        tag,
        (err) => new UncertainChange(tag, err),
        async (tx) => {
          const [head] = (await tx.query('SELECT product_id, user_id FROM orders WHERE id = $1', [orderId])) as Array<{
            product_id: number;
            user_id: string;
          }>;
          if (!head || head.user_id !== userId) throw new OrderNotFoundError(orderId);
          const product = await lockProductForReturns(tx, head.product_id);
          if (!product) throw new OrderNotFoundError(orderId);
          const [row] = (await tx.query(
            `SELECT ${ORDER_COLUMNS}, expires_at > now() AS open FROM orders WHERE id = $1 FOR UPDATE`,
            [orderId],
          )) as Array<OrderRecord & { open: boolean }>;
          const settled = decide(row);
          if (settled) return { order: settled, returned: null };
          const returned = await returnUnits(tx, tag, head.product_id, product, [row], 'cancelled');
          const [[done]] = (await tx.query(
            tagged(
              tag,
              `UPDATE orders SET status = 'cancelled', closed_at = now() WHERE id = $1 RETURNING ${ORDER_COLUMNS}`,
            ),
            [orderId],
          )) as Updated<OrderRecord>;
          return { order: toOrderRow(done), returned };
        },
      );
    } catch (err) {
      if (!(err instanceof UncertainChange)) throw err;
      const order = await this.outcomes.settleChange(err, orderId, userId, (r) => decide(r));
      return { order, returned: null };
    }
  }

  /** Products that have reservations past their expiresAt, oldest first. */
  async productsWithDueReservations(limit: number): Promise<number[]> {
    try {
      const rows = await this.db.query<Array<{ product_id: number }>>(
        `SELECT DISTINCT product_id FROM (
           SELECT product_id FROM orders WHERE status = 'reserved' AND expires_at <= now() ORDER BY expires_at LIMIT $1
         ) due`,
        [limit],
      );
      return rows.map((r) => r.product_id);
    } catch (err) {
      throw this.mapped(err);
    }
  }

  /**
   * Expires up to `limit` reservations of one product that ran out, and returns their units, in one
   * transaction. Any number of processes may sweep at once: SKIP LOCKED hands each order to one of
   * them, and `status = 'reserved'` is re-checked under the row lock, so a unit comes back once. A
   * sweeper that dies mid-transaction returns nothing; the next sweep finds the same orders.
   */
  async expireDue(productId: number, limit: number): Promise<Expired> {
    const tag = randomUUID();
    return this.inTransaction(
      tag,
      (err) => this.mapped(err) as Error,
      async (tx) => {
        // The due orders are locked before the product: this transaction's id (taken by its first
        // lock) is then newer than those of the sales that made them, so the event stream, which
        // is in transaction order, has each order's expiry after its reservation. The product lock
        // still comes before any unit goes back; FOR SHARE does not conflict with a cancel's.
        const rows = (await tx.query(
          `SELECT id, allocations, (extract(epoch FROM now() - expires_at) * 1000)::float8 AS lag_ms
             FROM orders WHERE product_id = $1 AND status = 'reserved' AND expires_at <= now()
            ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
          [productId, limit],
        )) as Array<{ id: string; allocations: Allocation[]; lag_ms: number }>;
        if (rows.length === 0) return { orders: 0, returned: null, lagsMs: [] };
        const product = await lockProductForReturns(tx, productId);
        if (!product) return { orders: 0, returned: null, lagsMs: [] };
        const returned = await returnUnits(tx, tag, productId, product, rows, 'expired');
        await tx.query(
          tagged(tag, `UPDATE orders SET status = 'expired', closed_at = now() WHERE id = ANY($1::bigint[])`),
          [rows.map((r) => r.id)],
        );
        return { orders: rows.length, returned, lagsMs: rows.map((r) => r.lag_ms) };
      },
    );
  }

  /** The order, if it exists and belongs to the user; else ORDER_NOT_FOUND (another user's order is not shown to exist). */
  private async findOwned(orderId: string, userId: string): Promise<OrderRecord> {
    let rows: OrderRecord[];
    try {
      rows = await this.db.query<OrderRecord[]>(
        `SELECT ${ORDER_COLUMNS}, expires_at > now() AS open FROM orders WHERE id = $1`,
        [orderId],
      );
    } catch (err) {
      throw this.mapped(err);
    }
    if (rows.length === 0 || rows[0].user_id !== userId) throw new OrderNotFoundError(orderId);
    return rows[0];
  }

  /** A reserved, open order that a conditional change still found in its way: a race just lost, retry. */
  private unchangedYet(r: OrderRecord): never {
    throw new BusyError(`order ${r.id} changed during the call, retry`, this.http.retryAfterS);
  }

  private inTransaction<T>(
    tag: string,
    uncertain: (err: unknown) => Error,
    work: (tx: QueryRunner) => Promise<T>,
  ): Promise<T> {
    return inTransaction(
      this.db,
      { commit: tagged(tag, 'COMMIT'), uncertain, mapped: (err) => this.mapped(err) },
      work,
    );
  }

  private mapped(err: unknown): unknown {
    return mappedFailure(err, this.http.retryAfterS, this.metrics);
  }
}

/** Why a payment cannot take the order: the refusal to throw, or null when nothing refuses it. */
function refusePay(r: OrderRecord & { open?: boolean }): null {
  if (r.status === 'cancelled') throw new OrderCancelledError(Number(r.id));
  if (r.status === 'expired' || (r.status === 'reserved' && r.open === false))
    throw new OrderExpiredError(Number(r.id));
  return null;
}
