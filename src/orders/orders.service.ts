// The order path: user lock, random segment, fall over when busy or empty, bounded wait when every
// live segment is busy, an authoritative read before SOLD_OUT, and several segments when no single
// one holds the quantity. See README "Design" for why each step is there.
import { Inject, Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { APP_CONFIG, ResolvedConfig } from '../config/app-config';
import { mapDatabaseError } from '../common/database-errors';
import {
  AlreadyOrderedError,
  BusyError,
  OrderNotFoundError,
  QuantityOverLimitError,
  SoldOutError,
} from '../common/domain-errors';
import { sleep } from '../common/sleep';
import { ProductCatalogService, ProductInfo } from '../inventory/product-catalog.service';
import { pickSegmentsFor, randomStart, visitOrder } from '../inventory/segment-plan';
import { StockHintsService } from '../inventory/stock-hints.service';
import { OrderRow, SegmentAttempt, StockRepository } from '../inventory/stock.repository';
import { lockKeys } from '../locks/lock-keys';
import { HeldLock, LockService } from '../locks/lock.service';
import { LocalLockBoard } from '../locks/local-lock-board';
import { MetricsService } from '../metrics/metrics.service';
import { OrderGateService } from './order-gate.service';

export interface PlaceOrder {
  userId: string;
  productId: number;
  quantity: number;
}

/** How many times the layout may change under one order before it gives up with BUSY. */
const MAX_LAYOUT_ROUNDS = 4;

@Injectable()
export class OrdersService {
  /** Segment locks this process holds, and its requests waiting for one. */
  private readonly board = new LocalLockBoard();

  constructor(
    @Inject(APP_CONFIG) private readonly config: ResolvedConfig,
    private readonly catalog: ProductCatalogService,
    private readonly hints: StockHintsService,
    private readonly gate: OrderGateService,
    private readonly stock: StockRepository,
    private readonly locks: LockService,
    private readonly metrics: MetricsService,
    private readonly db: DataSource,
  ) {}

  async place(req: PlaceOrder): Promise<OrderRow> {
    try {
      return await this.sell(req);
    } catch (err) {
      // A client retrying after a lost answer must learn that its order exists, also once the
      // product is sold out. Costs one index lookup, on the sold-out path only.
      if (err instanceof SoldOutError && (await this.stock.hasOrder(req.productId, req.userId))) throw new AlreadyOrderedError();
      throw err;
    }
  }

  private async sell(req: PlaceOrder): Promise<OrderRow> {
    const product = await this.catalog.get(req.productId);
    if (req.quantity > product.limitPerUser) throw new QuantityOverLimitError(product.limitPerUser);
    if (this.config.stockLocking === 'database') return this.allocate(product, req, new Set());

    const pass = await this.gate.enter(product, req.userId, req.quantity);
    try {
      return await this.allocate(product, req, pass.empty);
    } finally {
      await this.gate.leave(pass);
    }
  }

  async get(id: string): Promise<OrderRow> {
    if (!/^[1-9][0-9]{0,17}$/.test(id)) throw new OrderNotFoundError(id);
    let rows: Array<{ id: string; product_id: number; user_id: string; quantity: number; allocations: OrderRow['allocations']; created_at: Date }>;
    try {
      rows = await this.db.query('SELECT id, product_id, user_id, quantity, allocations, created_at FROM orders WHERE id = $1', [id]);
    } catch (err) {
      throw mapDatabaseError(err, this.config.retryAfterS);
    }
    if (rows.length === 0) throw new OrderNotFoundError(id);
    const r = rows[0];
    return { id: Number(r.id), productId: r.product_id, userId: r.user_id, quantity: r.quantity, allocations: r.allocations, createdAt: r.created_at };
  }

  /**
   * Single segments first (cheap, parallel); when none of them holds q, PostgreSQL is asked for
   * the truth: sold out, a changed layout (rebalance) to retry with, or q spread over several.
   */
  private async allocate(product: ProductInfo, req: PlaceOrder, knownEmpty: Set<number>): Promise<OrderRow> {
    let skip = knownEmpty;
    for (let round = 0; round < MAX_LAYOUT_ROUNDS; round++) {
      const order = await this.trySingleSegments(product, req, skip);
      if (order) return order;

      this.metrics.authoritativeChecks.inc();
      const layout = await this.stock.readLayout(product.id);
      if (!layout) throw new SoldOutError(0, req.quantity); // deleted under us: nothing to sell
      const remaining = layout.segments.reduce((sum, s) => sum + s.stock, 0);
      if (remaining < req.quantity) {
        if (remaining === 0 && this.config.stockLocking === 'redlock') {
          await this.hints.markSoldOut(product.id).catch(() => this.metrics.dependencyErrors.inc({ dependency: 'redis' }));
        }
        throw new SoldOutError(remaining, req.quantity);
      }
      if (layout.version !== product.layoutVersion || layout.segmentCount !== product.segmentCount) {
        product = this.catalog.remember({ ...product, segmentCount: layout.segmentCount, layoutVersion: layout.version });
      }
      // Retry single segments that (now) hold q; they were busy, or the layout moved.
      const fits = layout.segments.filter((s) => s.stock >= req.quantity);
      if (fits.length > 0) {
        const fitting = new Set(fits.map((s) => s.idx));
        skip = new Set(layout.segments.map((s) => s.idx).filter((i) => !fitting.has(i)));
        continue;
      }
      const spread = await this.tryManySegments(product, req, layout.segments);
      if (spread) return spread;
    }
    throw new BusyError('the stock layout kept changing under this order', this.config.retryAfterS);
  }

  /**
   * Visits every segment once from a random one, falling over past busy and empty ones. When all
   * live segments were busy, it waits: each wake-up (a local release, or the jittered retry delay)
   * makes one attempt, on the segment just released here or on the next busy one, so a waiting
   * order costs one Redis round trip per retry rather than one per segment. Until LOCK_WAIT_MS.
   */
  private async trySingleSegments(product: ProductInfo, req: PlaceOrder, skip: ReadonlySet<number>): Promise<OrderRow | null> {
    const deadline = Date.now() + this.config.lockWaitMs;
    const order = visitOrder(product.segmentCount, randomStart(product.segmentCount), skip);
    // Requests of this process already wait for this product: every live segment was busy a
    // moment ago, and each release goes to them first. Queue behind them instead of trying every
    // segment again (and asking Redis about the ones held elsewhere).
    const queued = this.config.stockLocking === 'redlock' && this.board.waiting(product.id) > 0;
    const busy: number[] = queued ? order : [];
    for (const idx of queued ? [] : order) {
      const outcome = await this.attemptSegment(product, idx, req);
      if (outcome === 'busy') {
        busy.push(idx);
        this.metrics.fallovers.inc({ reason: 'busy' });
      } else if (outcome.order) {
        return outcome.order;
      } else {
        this.metrics.fallovers.inc({ reason: 'empty' });
      }
    }
    if (busy.length === 0) return null;

    const started = Date.now();
    let turn = 0;
    while (busy.length > 0) {
      if (Date.now() >= deadline) {
        throw new BusyError(`every segment with stock stayed locked for ${this.config.lockWaitMs} ms`, this.config.retryAfterS);
      }
      const released = await this.board.waitForRelease(product.id, this.locks.backoffMs());
      const free = busy.filter((i) => !this.board.isHeld(product.id, i));
      if (free.length === 0) continue;
      // The segment just released here if it is one of ours, else the busy ones in turn.
      const idx = released !== null && free.includes(released) ? released : free[turn++ % free.length];
      const outcome = await this.attemptSegment(product, idx, req);
      if (outcome === 'busy') continue;
      if (outcome.order) {
        this.metrics.lockWaitSeconds.observe((Date.now() - started) / 1000);
        return outcome.order;
      }
      busy.splice(busy.indexOf(idx), 1);
      this.metrics.fallovers.inc({ reason: 'empty' });
    }
    return null;
  }

  /**
   * One segment: under its Redis lock (redlock mode) or under PostgreSQL's row lock alone.
   * Remembers a segment found empty, so later orders skip it.
   */
  private async attemptSegment(product: ProductInfo, idx: number, req: PlaceOrder): Promise<SegmentAttempt | 'busy'> {
    const hold = this.config.orderHoldMs;
    if (this.config.stockLocking === 'database') {
      return this.stock.takeFromSegment(product.id, idx, req.quantity, req.userId, hold);
    }
    // Held (or being taken) by another request of this very process: busy, no Redis round trip.
    if (this.board.isHeld(product.id, idx)) return 'busy';
    this.board.hold(product.id, idx);
    const key = lockKeys.segment(product.id, idx);
    let held: HeldLock | null = null;
    try {
      held = await this.locks.tryAcquire(key, this.config.lockTtlMs);
      if (!held) {
        this.metrics.lockBusy.inc();
        return 'busy';
      }
      const outcome = await this.stock.takeFromSegment(product.id, idx, req.quantity, req.userId);
      // The simulated downstream work of a sale, still inside the lock; an empty segment is let go at once.
      if (hold > 0 && outcome.order) await sleep(hold);
      if (outcome.remaining === null || outcome.remaining === 0) this.rememberEmpty(product, idx);
      return outcome;
    } finally {
      if (held) {
        // Sent now, its reply not awaited: on each master's connection the release is queued ahead
        // of any acquire that a woken local waiter sends next, and the order needs nothing from it.
        void this.locks.release(held);
        this.board.release(product.id, idx);
      } else {
        this.board.abandon(product.id, idx);
      }
    }
  }

  /** q over several segments: locks in ascending index order, then one transaction. */
  private async tryManySegments(product: ProductInfo, req: PlaceOrder, segments: Array<{ idx: number; stock: number }>): Promise<OrderRow | null> {
    const picked = pickSegmentsFor(req.quantity, segments);
    if (!picked) return null;
    if (this.config.stockLocking === 'database') {
      return this.stock.takeFromSegments(product.id, picked, req.quantity, req.userId, this.config.orderHoldMs);
    }
    const held: HeldLock[] = [];
    try {
      for (const idx of picked) {
        held.push(await this.locks.acquireWithin(lockKeys.segment(product.id, idx), this.config.lockTtlMs, this.config.lockWaitMs));
      }
      if (this.config.orderHoldMs > 0) await sleep(this.config.orderHoldMs);
      return await this.stock.takeFromSegments(product.id, picked, req.quantity, req.userId);
    } finally {
      await Promise.all(held.map((h) => this.locks.release(h)));
    }
  }

  private rememberEmpty(product: ProductInfo, idx: number): void {
    if (this.config.stockLocking !== 'redlock') return;
    this.hints.markEmpty(product.id, product.layoutVersion, idx).catch(() => this.metrics.dependencyErrors.inc({ dependency: 'redis' }));
  }
}
