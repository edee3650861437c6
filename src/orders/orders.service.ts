// The order path: user lock, random segment, fall over when busy or empty, bounded wait when every
// live segment is busy, an authoritative read before SOLD_OUT, and several segments when no single
// one holds the quantity. How a segment is held (Redlock and group commit, or PostgreSQL row locks
// alone) is the SegmentLocking provider chosen at start. See README "Design" for why each step is there.
import { Injectable } from '@nestjs/common';
import { HttpConfig, LocksConfig } from '../config/app-config';
import {
  AlreadyOrderedError,
  BusyError,
  OrderNotFoundError,
  QuantityOverLimitError,
  SaleEndedError,
  SaleNotStartedError,
  SoldOutError,
  UnavailableError,
} from '../common/domain-errors';
import { ProductCatalogService } from '../inventory/product-catalog.service';
import { ProductInfo } from '../inventory/product.types';
import { pickSegmentsFor, randomStart, visitOrder } from '../inventory/segment-plan';
import { SoldOutBoard } from '../inventory/sold-out-board.service';
import { StockHintsService } from '../inventory/stock-hints.service';
import { StockRepository } from '../inventory/stock.repository';
import { MetricsService } from '../metrics/metrics.service';
import { OrderPass, PlaceOrder, SegmentLocking } from './locking/segment-locking';
import { OrderRow, ReturnedUnits, UncertainWrite } from './order.types';
import { OrderLifecycleRepository } from './repositories/order-lifecycle.repository';
import { OrderReadsRepository } from './repositories/order-reads.repository';
import { OutcomesRepository } from './repositories/outcomes.repository';

export type { PlaceOrder } from './locking/segment-locking';

/**
 * How many times the layout may change under one order before it gives up with BUSY; also the
 * rounds an order always gets before LOCK_WAIT_MS can end it (see allocate).
 */
const MAX_LAYOUT_ROUNDS = 4;

@Injectable()
export class OrdersService {
  constructor(
    private readonly lockConfig: LocksConfig,
    private readonly http: HttpConfig,
    private readonly catalog: ProductCatalogService,
    private readonly locking: SegmentLocking,
    private readonly stock: StockRepository,
    private readonly orders: OrderReadsRepository,
    private readonly outcomes: OutcomesRepository,
    private readonly lifecycle: OrderLifecycleRepository,
    private readonly hints: StockHintsService,
    private readonly board: SoldOutBoard,
    private readonly metrics: MetricsService,
  ) {}

  async place(req: PlaceOrder): Promise<OrderRow> {
    try {
      return await this.sellPastStaleHint(req);
    } catch (err) {
      // A client retrying after a lost answer must learn that its order exists, and which, also
      // once the product is sold out. Costs one index lookup, on these two paths only.
      if (err instanceof SoldOutError) {
        // From now on this process answers the product's refusals from memory, if it is sold out.
        if (err.remaining === 0) this.board.learn(req.productId);
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
   * The Redis sold-out flag is a hint: before it refuses, PostgreSQL is asked, so a flag whose
   * clearing was lost (Redis away when units came back, a failover) cannot hide returned units.
   * Such a flag is cleared and the order sold. This costs one read per refusal only until this
   * process's sold-out board knows the product (then refusals never reach the order path).
   */
  private async sellPastStaleHint(req: PlaceOrder): Promise<OrderRow> {
    try {
      return await this.sell(req);
    } catch (err) {
      if (!(err instanceof SoldOutError && err.fromHint)) throw err;
      const layout = await this.stock.readLayout(req.productId);
      const left = layout?.segments.filter((s) => s.stock > 0) ?? [];
      const remaining = left.reduce((sum, s) => sum + s.stock, 0);
      if (layout === null || remaining < req.quantity) throw new SoldOutError(remaining, req.quantity);
      this.metrics.staleSoldOutFlags.inc();
      await this.hints
        .stockReturned(
          req.productId,
          layout.version,
          left.map((s) => s.idx),
        )
        .catch(() => this.metrics.dependencyErrors.inc({ dependency: 'redis' }));
      return this.sell(req);
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
      if (err instanceof UncertainWrite) return this.outcomes.settle(err);
      throw err;
    }
  }

  private async sell(req: PlaceOrder): Promise<OrderRow> {
    const product = await this.catalog.get(req.productId);
    // The sale window from the cached product: a refusal costs no lock and no PostgreSQL.
    const now = Date.now();
    if (product.startsAt !== null && now < product.startsAt) {
      throw new SaleNotStartedError(new Date(product.startsAt), Math.max(1, Math.ceil((product.startsAt - now) / 1000)));
    }
    if (product.endsAt !== null && now >= product.endsAt) throw new SaleEndedError(new Date(product.endsAt));
    if (req.quantity > product.limitPerUser) throw new QuantityOverLimitError(product.limitPerUser);
    const pass = await this.locking.enter(product, req);
    try {
      return await this.settled(() => this.allocate(product, req, pass));
    } finally {
      await this.locking.leave(pass);
    }
  }

  async get(id: string): Promise<OrderRow> {
    const order = await this.orders.findById(orderId(id));
    if (!order) throw new OrderNotFoundError(id);
    return order;
  }

  /** Pays the user's reserved order; PostgreSQL decides whether the reservation still runs. Idempotent. */
  async pay(id: string, userId: string): Promise<OrderRow> {
    const { order, changed } = await this.lifecycle.pay(orderId(id), userId);
    if (changed) this.metrics.orderTransitions.inc({ to: 'paid' });
    return order;
  }

  /** Cancels the user's reserved order; its units are back on sale when this answers. Idempotent. */
  async cancel(id: string, userId: string): Promise<OrderRow> {
    const { order, returned } = await this.lifecycle.cancel(orderId(id), userId);
    if (returned) {
      this.metrics.orderTransitions.inc({ to: 'cancelled' });
      await this.unitsReturned(returned, 'cancelled');
    }
    return order;
  }

  /** Counts returned units and clears the hints that would hide them (a failure only costs reads until SOLD_OUT_TTL_MS). */
  async unitsReturned(returned: ReturnedUnits, reason: 'cancelled' | 'expired'): Promise<void> {
    this.metrics.unitsReturned.inc({ reason }, returned.units);
    this.board.forget(returned.productId);
    await this.hints
      .stockReturned(returned.productId, returned.layoutVersion, returned.segments)
      .catch(() => this.metrics.dependencyErrors.inc({ dependency: 'redis' }));
  }

  /**
   * Single segments first (cheap, parallel); when none of them holds q, PostgreSQL is asked for
   * the truth: sold out, a changed layout (rebalance) to retry with, or q spread over several.
   * A changed layout counts against MAX_LAYOUT_ROUNDS. Units that the read saw but other orders
   * took before this one locked their segment (returned units coming back one by one to many
   * buyers) are a lost race, not a layout change: the order goes on while units keep showing up,
   * ending with SOLD_OUT once the read finds none, and answers BUSY only after MAX_LAYOUT_ROUNDS
   * rounds and LOCK_WAIT_MS, the bound it already has for busy locks.
   */
  private async allocate(product: ProductInfo, req: PlaceOrder, pass: OrderPass): Promise<OrderRow> {
    let skip: ReadonlySet<number> = pass.empty;
    const deadline = Date.now() + this.lockConfig.waitMs;
    let layoutChanges = 0;
    // Segments whose lock master (Redis Cluster) could not be reached during this order.
    let down = new Set<number>();
    for (let round = 1; ; round++) {
      const order = await this.trySingleSegments(product, req, skip, down);
      if (order) return order;

      this.metrics.authoritativeChecks.inc();
      const layout = await this.stock.readLayout(product.id);
      if (!layout) throw new SoldOutError(0, req.quantity); // deleted under us: nothing to sell
      const remaining = layout.segments.reduce((sum, s) => sum + s.stock, 0);
      if (remaining < req.quantity) {
        if (remaining === 0) await this.locking.soldOut(product.id, pass);
        throw new SoldOutError(remaining, req.quantity);
      }
      if (layout.version !== product.layoutVersion || layout.segmentCount !== product.segmentCount) {
        if (++layoutChanges >= MAX_LAYOUT_ROUNDS) throw new BusyError('the stock layout kept changing under this order', this.http.retryAfterS);
        product = this.catalog.remember({ ...product, segmentCount: layout.segmentCount, layoutVersion: layout.version });
        down = new Set();
      } else if (round >= MAX_LAYOUT_ROUNDS && Date.now() >= deadline) {
        throw new BusyError(`the units left kept going to other orders for ${this.lockConfig.waitMs} ms`, this.http.retryAfterS);
      }
      // Retry single segments that (now) hold q; they were busy, or the layout moved.
      const reachable = layout.segments.filter((s) => !down.has(s.idx));
      const fits = reachable.filter((s) => s.stock >= req.quantity);
      if (fits.length > 0) {
        const fitting = new Set(fits.map((s) => s.idx));
        skip = new Set(layout.segments.map((s) => s.idx).filter((i) => !fitting.has(i)));
        continue;
      }
      const spread = await this.tryManySegments(product, req, reachable);
      if (spread) return spread;
      if (down.size > 0 && reachable.reduce((sum, s) => sum + s.stock, 0) < req.quantity) {
        // The units are there, behind a Redis Cluster master that does not answer: not SOLD_OUT.
        throw new UnavailableError('redis', this.http.retryAfterS, new Error(`segments ${[...down].join(', ')}: lock master unreachable`));
      }
    }
  }

  /**
   * Visits every segment once from a random one, falling over past busy and empty ones; with group
   * commit it stops asking for more once this process holds ORDER_HOLDS_MAX of the product's
   * segments, and waits to ride in one of those holds. When all live segments were busy, it waits:
   * each wake-up (a local release, or the jittered retry delay) makes one attempt, on the segment
   * just released here or on the next busy one, so a waiting order costs one Redis round trip per
   * retry rather than one per segment. Until LOCK_WAIT_MS.
   */
  private async trySingleSegments(product: ProductInfo, req: PlaceOrder, skip: ReadonlySet<number>, down: Set<number>): Promise<OrderRow | null> {
    const deadline = Date.now() + this.lockConfig.waitMs;
    const order = visitOrder(product.segmentCount, randomStart(product.segmentCount), skip);
    const busy: number[] = [];
    for (const [i, idx] of order.entries()) {
      // Requests of this process already wait for this product (every live segment was busy a
      // moment ago, and each release goes to them first), or this process holds as many of its
      // segments as it may: queue behind them instead of asking Redis about more segments.
      if (this.locking.queueBehind(product.id)) {
        busy.push(...order.slice(i));
        break;
      }
      const outcome = await this.locking.attempt(product, idx, req);
      if (outcome === 'busy') {
        busy.push(idx);
        this.metrics.fallovers.inc({ reason: 'busy' });
      } else if (outcome === 'down') {
        down.add(idx);
        this.metrics.fallovers.inc({ reason: 'unreachable' });
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
      // Every segment this order could try is held by this process, or it holds all it may: only
      // a local release or a holder taking this order as a rider can help, and both wake it at
      // once, so it need not poll on the retry delay.
      const patient = this.locking.atCapacity(product.id) || busy.every((i) => this.locking.heldHere(product.id, i));
      const end = await this.locking.wait(product.id, req, patient);
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
      // At capacity: a holder here will take this order as a rider, or a release wake it.
      if (this.locking.atCapacity(product.id)) continue;
      const released = 'released' in end ? end.released : null;
      const free = busy.filter((i) => !this.locking.heldHere(product.id, i));
      if (free.length === 0) continue;
      // The segment just released here if it is one of ours, else the busy ones in turn.
      const idx = released !== null && free.includes(released) ? released : free[turn++ % free.length];
      const outcome = await this.locking.attempt(product, idx, req);
      if (outcome === 'busy') continue;
      if (outcome === 'down') {
        busy.splice(busy.indexOf(idx), 1);
        down.add(idx);
        this.metrics.fallovers.inc({ reason: 'unreachable' });
        continue;
      }
      if (outcome.order) {
        this.metrics.lockWaitSeconds.observe((Date.now() - started) / 1000);
        return outcome.order;
      }
      busy.splice(busy.indexOf(idx), 1);
      this.metrics.fallovers.inc({ reason: 'empty' });
    }
    return null;
  }

  /** q over several segments, the fullest first; null when they no longer hold q between them. */
  private async tryManySegments(product: ProductInfo, req: PlaceOrder, segments: Array<{ idx: number; stock: number }>): Promise<OrderRow | null> {
    const picked = pickSegmentsFor(req.quantity, segments);
    if (!picked) return null;
    return this.locking.sellSpread(product, picked, req);
  }
}

/** An order id as the path gives it: a positive bigint in decimal, else ORDER_NOT_FOUND. */
function orderId(raw: string): string {
  if (!/^[1-9][0-9]{0,17}$/.test(raw)) throw new OrderNotFoundError(raw);
  return raw;
}
