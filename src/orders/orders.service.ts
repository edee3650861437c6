// The order path: user lock, random segment, fall over when busy or empty, bounded wait when every
// live segment is busy, an authoritative read before SOLD_OUT, and several segments when no single
// one holds the quantity. See README "Design" for why each step is there.
import { setTimeout as sleep } from 'node:timers/promises';
import { Injectable } from '@nestjs/common';
import { BenchmarkConfig, HttpConfig, LocksConfig } from '../config/app-config';
import {
  AlreadyOrderedError,
  BusyError,
  OrderInProgressError,
  OrderNotFoundError,
  QuantityOverLimitError,
  SoldOutError,
} from '../common/domain-errors';
import { ProductCatalogService, ProductInfo } from '../inventory/product-catalog.service';
import { pickSegmentsFor, randomStart, visitOrder } from '../inventory/segment-plan';
import { StockHintsService } from '../inventory/stock-hints.service';
import { StockRepository } from '../inventory/stock.repository';
import { lockKeys } from '../locks/lock-keys';
import { HeldLock, LockService } from '../locks/lock.service';
import { LocalLockBoard } from '../locks/local-lock-board';
import { MetricsService } from '../metrics/metrics.service';
import { OrderGateService } from './order-gate.service';
import { BatchAttempt, BatchEntry, BatchResult, OrderRow, OrdersRepository, SegmentAttempt, UncertainBatch, UncertainWrite } from './orders.repository';

export interface PlaceOrder {
  userId: string;
  productId: number;
  quantity: number;
}

/** What a lock holder tells an order it served in its hold (group commit). */
type RideAnswer = { segment: number; result: BatchResult; remaining: number | null } | { error: unknown };

/** How many times the layout may change under one order before it gives up with BUSY. */
const MAX_LAYOUT_ROUNDS = 4;

@Injectable()
export class OrdersService {
  /** Segment locks this process holds, and its requests waiting for one. */
  private readonly board = new LocalLockBoard<BatchEntry, RideAnswer>();

  constructor(
    private readonly lockConfig: LocksConfig,
    private readonly http: HttpConfig,
    private readonly benchmark: BenchmarkConfig,
    private readonly catalog: ProductCatalogService,
    private readonly hints: StockHintsService,
    private readonly gate: OrderGateService,
    private readonly stock: StockRepository,
    private readonly orders: OrdersRepository,
    private readonly locks: LockService,
    private readonly metrics: MetricsService,
  ) {}

  async place(req: PlaceOrder): Promise<OrderRow> {
    try {
      return await this.sell(req);
    } catch (err) {
      // A client retrying after a lost answer must learn that its order exists, and which, also
      // once the product is sold out. Costs one index lookup, on these two paths only.
      if (err instanceof SoldOutError) {
        const existing = await this.orders.findByKey(req.productId, req.userId);
        if (existing) throw new AlreadyOrderedError(existing.id);
      } else if (err instanceof AlreadyOrderedError && err.orderId === undefined) {
        // The unique key refused the insert: the order is there; its id is a courtesy.
        const existing = await this.orders.findByKey(req.productId, req.userId).catch(() => null);
        if (existing) throw new AlreadyOrderedError(existing.id);
      }
      throw err;
    }
  }

  /**
   * Runs a sale; a write that PostgreSQL may have committed without telling is settled before
   * the answer (still inside the user lock), so that BUSY and UNAVAILABLE mean nothing happened.
   */
  private async settled(sale: () => Promise<OrderRow>): Promise<OrderRow> {
    try {
      return await sale();
    } catch (err) {
      if (err instanceof UncertainWrite) return this.orders.settle(err);
      throw err;
    }
  }

  private async sell(req: PlaceOrder): Promise<OrderRow> {
    const product = await this.catalog.get(req.productId);
    if (req.quantity > product.limitPerUser) throw new QuantityOverLimitError(product.limitPerUser);
    if (this.lockConfig.stockLocking === 'database') return this.settled(() => this.allocate(product, req, new Set()));

    const pass = await this.gate.enter(product, req.userId, req.quantity);
    try {
      return await this.settled(() => this.allocate(product, req, pass.empty));
    } finally {
      await this.gate.leave(pass);
    }
  }

  async get(id: string): Promise<OrderRow> {
    if (!/^[1-9][0-9]{0,17}$/.test(id)) throw new OrderNotFoundError(id);
    const order = await this.orders.findById(id);
    if (!order) throw new OrderNotFoundError(id);
    return order;
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
        if (remaining === 0 && this.lockConfig.stockLocking === 'redlock') {
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
    throw new BusyError('the stock layout kept changing under this order', this.http.retryAfterS);
  }

  /**
   * Visits every segment once from a random one, falling over past busy and empty ones. When all
   * live segments were busy, it waits: each wake-up (a local release, or the jittered retry delay)
   * makes one attempt, on the segment just released here or on the next busy one, so a waiting
   * order costs one Redis round trip per retry rather than one per segment. Until LOCK_WAIT_MS.
   */
  private async trySingleSegments(product: ProductInfo, req: PlaceOrder, skip: ReadonlySet<number>): Promise<OrderRow | null> {
    const deadline = Date.now() + this.lockConfig.waitMs;
    const order = visitOrder(product.segmentCount, randomStart(product.segmentCount), skip);
    // Requests of this process already wait for this product: every live segment was busy a
    // moment ago, and each release goes to them first. Queue behind them instead of trying every
    // segment again (and asking Redis about the ones held elsewhere).
    const queued = this.lockConfig.stockLocking === 'redlock' && this.board.waiting(product.id) > 0;
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
        throw new BusyError(`every segment with stock stayed locked for ${this.lockConfig.waitMs} ms`, this.http.retryAfterS);
      }
      const end = await this.board.waitForRelease(product.id, this.locks.backoffMs(), { userId: req.userId, quantity: req.quantity });
      if ('served' in end) {
        // A holder of this process sold (or refused) this order in its own lock hold.
        const answer = end.served;
        if ('error' in answer) throw answer.error;
        if ('order' in answer.result) {
          this.metrics.lockWaitSeconds.observe((Date.now() - started) / 1000);
          return answer.result.order;
        }
        if ('alreadyOrdered' in answer.result) throw new AlreadyOrderedError();
        if (answer.remaining === null || answer.remaining < req.quantity) {
          const at = busy.indexOf(answer.segment);
          if (at >= 0) busy.splice(at, 1);
          this.metrics.fallovers.inc({ reason: 'empty' });
        }
        continue;
      }
      const released = 'released' in end ? end.released : null;
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
    const hold = this.benchmark.orderHoldMs;
    if (this.lockConfig.stockLocking === 'database') {
      return this.orders.sellFromSegment(product.id, idx, req.quantity, req.userId, hold);
    }
    // Held (or being taken) by another request of this very process: busy, no Redis round trip.
    if (this.board.isHeld(product.id, idx)) return 'busy';
    this.board.hold(product.id, idx);
    const key = lockKeys.segment(product.id, idx);
    let held: HeldLock | null = null;
    try {
      held = await this.locks.tryAcquire(key, this.lockConfig.ttlMs);
      if (!held) {
        this.metrics.lockBusy.inc();
        return 'busy';
      }
      const outcome = await this.sellInHold(product, idx, req);
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

  /**
   * Inside a held segment lock: this order alone (one statement, as with ORDER_BATCH_MAX=1), or
   * with up to ORDER_BATCH_MAX - 1 orders of this process that wait for the product (group
   * commit): one statement for all, each answered on its own. ORDER_HOLD_MS is spent once per
   * hold, after a sale and before any answer; an empty segment is let go at once.
   */
  private async sellInHold(product: ProductInfo, idx: number, req: PlaceOrder): Promise<SegmentAttempt> {
    const hold = this.benchmark.orderHoldMs;
    const riders = this.board.takeRiders(product.id, this.lockConfig.batchMax - 1);
    if (riders.length === 0) {
      const outcome = await this.orders.sellFromSegment(product.id, idx, req.quantity, req.userId);
      if (hold > 0 && outcome.order) await sleep(hold);
      return outcome;
    }
    let batch: BatchAttempt | undefined;
    let failure = (_entry: number): unknown => new BusyError('the lock holder failed before serving this order', this.http.retryAfterS);
    try {
      batch = await this.orders.sellBatch(product.id, idx, [req, ...riders.map((r) => r.ride)]);
      this.metrics.batchSize.observe(riders.length + 1);
      if (hold > 0 && batch.results.some((r) => 'order' in r)) await sleep(hold);
    } catch (err) {
      // A lost reply: every order of the batch settles its own outcome, in its own request.
      failure = (entry) => (err instanceof UncertainBatch ? err.writes[entry] : err);
      throw failure(0);
    } finally {
      // Every rider is answered exactly once, whatever happened to the batch.
      const done = batch;
      riders.forEach((r, i) => r.serve(done ? { segment: idx, result: done.results[i + 1], remaining: done.remaining } : { error: failure(i + 1) }));
    }
    const own = batch.results[0];
    if ('alreadyOrdered' in own) throw new AlreadyOrderedError();
    return 'order' in own ? { order: own.order, remaining: batch.remaining } : { remaining: batch.remaining };
  }

  /** q over several segments: locks in ascending index order, then one transaction. */
  private async tryManySegments(product: ProductInfo, req: PlaceOrder, segments: Array<{ idx: number; stock: number }>): Promise<OrderRow | null> {
    const picked = pickSegmentsFor(req.quantity, segments);
    if (!picked) return null;
    if (this.lockConfig.stockLocking === 'database') {
      return this.orders.sellFromSegments(product.id, picked, req.quantity, req.userId, this.benchmark.orderHoldMs);
    }
    const held: HeldLock[] = [];
    try {
      for (const idx of picked) {
        held.push(await this.locks.acquireWithin(lockKeys.segment(product.id, idx), this.lockConfig.ttlMs, this.lockConfig.waitMs));
      }
      if (this.benchmark.orderHoldMs > 0) await sleep(this.benchmark.orderHoldMs);
      return await this.orders.sellFromSegments(product.id, picked, req.quantity, req.userId);
    } finally {
      await Promise.all(held.map((h) => this.locks.release(h)));
    }
  }

  private rememberEmpty(product: ProductInfo, idx: number): void {
    if (this.lockConfig.stockLocking !== 'redlock') return;
    this.hints.markEmpty(product.id, product.layoutVersion, idx).catch(() => this.metrics.dependencyErrors.inc({ dependency: 'redis' }));
  }
}
