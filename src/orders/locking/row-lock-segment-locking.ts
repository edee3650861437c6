// STOCK_LOCKING=database: no Redis at all on the order path. A segment is held by PostgreSQL's row
// lock for the length of its transaction, so a try never finds it busy, it waits for the row. The
// benchmark's no-Redis-lock peer; ORDER_HOLD_MS is spent inside the transaction, row locked.
import { setTimeout as sleep } from 'node:timers/promises';
import { Injectable } from '@nestjs/common';
import { BenchmarkConfig, LocksConfig } from '../../config/app-config';
import type { ProductInfo } from '../../inventory/product.types';
import type { WaitEnd } from '../../locks/local-lock-board';
import { OrderRow, SegmentAttempt } from '../order.types';
import { SaleWritesRepository } from '../repositories/sale-writes.repository';
import { OrderPass, PlaceOrder, RideAnswer, SegmentLocking } from './segment-locking';

@Injectable()
export class RowLockSegmentLocking extends SegmentLocking {
  constructor(
    private readonly lockConfig: LocksConfig,
    private readonly benchmark: BenchmarkConfig,
    private readonly orders: SaleWritesRepository,
  ) {
    super();
  }

  enter(_product: ProductInfo, req: PlaceOrder): Promise<OrderPass> {
    return Promise.resolve({ userId: req.userId, token: null, empty: new Set<number>(), generation: null });
  }

  leave(): Promise<void> {
    return Promise.resolve();
  }

  queueBehind(): boolean {
    return false;
  }

  atCapacity(): boolean {
    return false;
  }

  /** Never busy and never down: the row lock waits, and there is no Redis. */
  attempt(product: ProductInfo, idx: number, req: PlaceOrder): Promise<SegmentAttempt> {
    return this.orders.sellFromSegment(
      product.id,
      idx,
      req.quantity,
      req.userId,
      this.benchmark.orderHoldMs,
      req.admissionPosition,
    );
  }

  /** Never reached (a try is never busy); kept total for the interface. */
  async wait(): Promise<WaitEnd<RideAnswer>> {
    await sleep(this.lockConfig.retryDelayMs);
    return { kind: 'timedOut' };
  }

  heldHere(): boolean {
    return false;
  }

  sellSpread(product: ProductInfo, picked: number[], req: PlaceOrder): Promise<OrderRow | null> {
    return this.orders.sellFromSegments(
      product.id,
      picked,
      req.quantity,
      req.userId,
      this.benchmark.orderHoldMs,
      req.admissionPosition,
    );
  }

  soldOut(): Promise<void> {
    return Promise.resolve();
  }
}
