// The order path: user lock, random segment, fall over when busy or empty, bounded wait when every
// live segment is busy, an authoritative read before SOLD_OUT, and several segments when no single
// one holds the quantity. How a segment is held (the gate, Redlock, group commit) is
// sale/segment-locking.service.ts; the sale's outcomes come back as values (sale/sale.ts), and
// only place() turns sold out into the client's error. See docs/order-path.md for why each step is there.
import { Injectable } from '@nestjs/common';
import { HttpConfig, LocksConfig } from '../config/app-config';
import {
  AdmissionInvalidError,
  AlreadyOrderedError,
  BusyError,
  OrderNotFoundError,
  QuantityOverLimitError,
  SaleEndedError,
  SaleNotStartedError,
  SoldOutError,
  UnavailableError,
} from '../common/domain-errors';
import { unreachable } from '../common/unreachable';
import { ProductCatalogService } from '../inventory/product-catalog.service';
import { ProductInfo } from '../inventory/product.types';
import { pickSegmentsFor, randomStart, visitOrder } from '../inventory/segment-plan';
import { Refusal, SoldOutBoardService } from '../inventory/sold-out-board.service';
import { StockHintsService } from '../inventory/stock-hints.service';
import { Layout, StockRepository } from '../inventory/stock.repository';
import { MetricsService } from '../metrics/metrics.service';
import { FirstPass, nextStep, OrderPass, PlaceOrder, SaleEnd, Search, servedAnswer, SoldOut } from './sale/sale';
import { SegmentLockingService } from './sale/segment-locking.service';
import { OrderRow, ReturnedUnits, UncertainWrite } from './order.types';
import { OrderLifecycleRepository } from './repositories/order-lifecycle.repository';
import { OrderReadsRepository } from './repositories/order-reads.repository';
import { OutcomesRepository } from './repositories/outcomes.repository';
import { AdmissionsService } from '../admissions/admissions.service';

export type { PlaceOrder } from './sale/sale';

/**
 * How many times the layout may change under one order before it gives up with BUSY; also the
 * rounds an order always gets before its deadline can end it as a lost race (see allocate).
 */
const MAX_LAYOUT_ROUNDS = 4;

@Injectable()
export class OrdersService {
  constructor(
    private readonly lockConfig: LocksConfig,
    private readonly http: HttpConfig,
    private readonly catalog: ProductCatalogService,
    private readonly segmentLocking: SegmentLockingService,
    private readonly stock: StockRepository,
    private readonly orderReads: OrderReadsRepository,
    private readonly outcomes: OutcomesRepository,
    private readonly lifecycle: OrderLifecycleRepository,
    private readonly hints: StockHintsService,
    private readonly board: SoldOutBoardService,
    private readonly metrics: MetricsService,
    private readonly admissions: AdmissionsService,
  ) {}

  /** `admission`: the waiting room's token, for a product that has one. */
  async place(req: PlaceOrder, admission?: string): Promise<OrderRow> {
    const asked = Date.now();
    const end = await this.sellOrLearn(req, admission, asked);
    if (end.kind === 'sold') return end.order;
    if (end.kind === 'refused') {
      if (end.refusal.kind === 'sold_out') throw new SoldOutError(0, req.quantity);
      throw new AlreadyOrderedError(end.refusal.orderId);
    }
    // A client retrying after a lost answer must learn that its order exists, and which, also once
    // the product is sold out; and when the unique key refused the insert, the order is there and
    // its id is a courtesy. Costs one index lookup, when the board could not tell.
    const existing = await this.orderReads
      .findByKey(req.productId, req.userId)
      .catch((err: unknown) => (end.kind === 'taken' ? null : Promise.reject(err as Error)));
    if (existing) throw new AlreadyOrderedError(existing.id);
    if (end.kind === 'taken') throw end.refused;
    throw new SoldOutError(end.remaining, req.quantity);
  }

  /**
   * The sale, or what answers the buyer when nothing is left: the sold-out board's read (sent after
   * this request began, one for every order of the product waiting then), which knows whether the
   * buyer holds an order and from then on lets the door answer the product from memory. The Redis
   * sold-out flag is a hint that this read confirms: a flag whose clearing was lost (Redis away when
   * units came back, a failover) cannot hide returned units, as the read then shows them, the flag
   * is cleared and the order sold. `taken`: the unique key refused the insert.
   */
  private async sellOrLearn(
    req: PlaceOrder,
    admission: string | undefined,
    asked: number,
  ): Promise<SaleEnd | { kind: 'refused'; refusal: Refusal } | { kind: 'taken'; refused: AlreadyOrderedError }> {
    try {
      const end = await this.sell(req, admission);
      if (end.kind === 'sold' || (end.remaining > 0 && !end.fromHint)) return end;
      const seen = await this.board.soldOutFor(req.productId, req.userId, asked);
      switch (seen.kind) {
        case 'sold_out':
        case 'already_ordered':
          return { kind: 'refused', refusal: seen };
        case 'failed':
          throw seen.error;
        case 'nothing_left':
          return { kind: 'soldOut', remaining: 0, fromHint: false };
        case 'units_left':
          if (!end.fromHint || seen.remaining < req.quantity)
            return { kind: 'soldOut', remaining: seen.remaining, fromHint: false };
          // The flag's clearing was lost: clear it with the layout the read saw, and sell.
          this.metrics.staleSoldOutFlags.inc();
          await this.hints
            .stockReturned(req.productId, seen.layoutVersion, seen.withStock)
            .catch(() => this.metrics.dependencyErrors.inc({ dependency: 'redis' }));
          return await this.sell(req, admission);
      }
    } catch (err) {
      if (err instanceof AlreadyOrderedError && err.orderId === undefined) return { kind: 'taken', refused: err };
      throw err;
    }
  }

  /**
   * Runs a sale; a write that PostgreSQL may have committed without telling is settled before
   * the answer (still inside the user lock), so that BUSY and UNAVAILABLE mean nothing happened.
   */
  private async settled(sale: () => Promise<SaleEnd>): Promise<SaleEnd> {
    try {
      return await sale();
    } catch (err) {
      if (err instanceof UncertainWrite) return { kind: 'sold', order: await this.outcomes.settle(err) };
      throw err;
    }
  }

  private async sell(req: PlaceOrder, admission: string | undefined): Promise<SaleEnd> {
    const product = await this.catalog.get(req.productId);
    // The sale window from the cached product: a refusal costs no lock and no PostgreSQL.
    const now = Date.now();
    if (product.startsAt !== null && now < product.startsAt) {
      throw new SaleNotStartedError(
        new Date(product.startsAt),
        Math.max(1, Math.ceil((product.startsAt - now) / 1000)),
      );
    }
    if (product.endsAt !== null && now >= product.endsAt) throw new SaleEndedError(new Date(product.endsAt));
    if (req.quantity > product.limitPerUser) throw new QuantityOverLimitError(product.limitPerUser);
    // A waiting room's product sells only to an admitted buyer, each admission once (see docs/waiting-room.md).
    if (product.waitingRoom)
      req = { ...req, admissionPosition: await this.admissions.check(product.id, req.userId, admission) };
    else if (admission !== undefined) throw new AdmissionInvalidError(`product ${product.id} has no waiting room`);
    const entry = await this.segmentLocking.enter(product, req);
    if (entry.kind === 'soldOut') return { kind: 'soldOut', remaining: 0, fromHint: true };
    const { pass } = entry;
    try {
      return await this.settled(() => this.allocate(product, req, pass));
    } finally {
      await this.segmentLocking.leave(pass);
    }
  }

  async get(id: string): Promise<OrderRow> {
    const order = await this.orderReads.findById(orderId(id));
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
   * rounds and LOCK_WAIT_MS after the order began (its deadline).
   */
  private async allocate(product: ProductInfo, req: PlaceOrder, pass: OrderPass): Promise<SaleEnd> {
    const search: Search = { req, pass, product, deadline: Date.now() + this.lockConfig.waitMs, down: new Set() };
    let skip: ReadonlySet<number> = pass.empty;
    let layoutChanges = 0;
    for (let round = 1; ; round++) {
      const single = await this.sellFromOneSegment(search, skip);
      if (single) return { kind: 'sold', order: single };

      const read = await this.authoritativeLayout(search);
      if (read.kind === 'soldOut') return read;
      const { layout } = read;
      if (layout.version !== search.product.layoutVersion || layout.segmentCount !== search.product.segmentCount) {
        if (++layoutChanges >= MAX_LAYOUT_ROUNDS)
          throw new BusyError('the stock layout kept changing under this order', this.http.retryAfterS);
        search.product = this.catalog.remember({
          ...search.product,
          segmentCount: layout.segmentCount,
          layoutVersion: layout.version,
        });
        search.down.clear();
      } else if (round >= MAX_LAYOUT_ROUNDS && Date.now() >= search.deadline) {
        throw new BusyError(
          `the units left kept going to other orders for ${this.lockConfig.waitMs} ms`,
          this.http.retryAfterS,
        );
      }

      const next = nextStep(search, layout);
      switch (next.kind) {
        case 'singles':
          // Single segments that (now) hold q: they were busy, or the layout moved.
          skip = next.skip;
          break;
        case 'spread': {
          const spread = await this.sellSpread(search, next.over);
          if (spread) return { kind: 'sold', order: spread };
          this.refuseIfBehindDownMasters(search, next.over);
          break;
        }
        default:
          unreachable(next);
      }
    }
  }

  /**
   * Visits every segment once from a random one, falling over past busy, empty and unreachable
   * ones (firstPass), then waits for the busy ones (waitForBusy), for up to LOCK_WAIT_MS from the
   * start of this round. Each round gets a wait of its own: the segments it waits for are the
   * ones PostgreSQL has just shown to hold units, news that the earlier rounds did not have; the
   * order's deadline bounds how many such rounds it makes (see allocate). Null when none sold.
   */
  private async sellFromOneSegment(search: Search, skip: ReadonlySet<number>): Promise<OrderRow | null> {
    const waitUntil = Date.now() + this.lockConfig.waitMs;
    const first = await this.firstPass(search, skip);
    switch (first.kind) {
      case 'sold':
        return first.order;
      case 'unsold':
        return this.waitForBusy(search, first.busy, waitUntil);
      default:
        return unreachable(first);
    }
  }

  /**
   * One try at each segment not skipped, from a random start. With group commit it stops asking
   * for more once this process holds ORDER_HOLDS_MAX of the product's segments, and counts the
   * rest busy: the order will wait to ride in one of those holds.
   */
  private async firstPass(search: Search, skip: ReadonlySet<number>): Promise<FirstPass> {
    const { product, req } = search;
    const order = visitOrder(product.segmentCount, randomStart(product.segmentCount), skip);
    const busy: number[] = [];
    for (const [i, idx] of order.entries()) {
      // Requests of this process already wait for this product (every live segment was busy a
      // moment ago, and each release goes to them first), or this process holds as many of its
      // segments as it may: queue behind them instead of asking Redis about more segments.
      if (this.segmentLocking.queueBehind(product.id)) return { kind: 'unsold', busy: [...busy, ...order.slice(i)] };
      const tried = await this.segmentLocking.attempt(product, idx, req);
      switch (tried.kind) {
        case 'sold':
          return { kind: 'sold', order: tried.order };
        case 'short':
          this.metrics.fallovers.inc({ reason: 'empty' });
          break;
        case 'busy':
          busy.push(idx);
          this.metrics.fallovers.inc({ reason: 'busy' });
          break;
        case 'down':
          search.down.add(idx);
          this.metrics.fallovers.inc({ reason: 'unreachable' });
          break;
        default:
          return unreachable(tried);
      }
    }
    return { kind: 'unsold', busy };
  }

  /**
   * The segments found busy, waited for until `waitUntil`: each wake-up (a local release,
   * or the jittered retry delay) makes one attempt, on the segment just released here or on the
   * next busy one, so a waiting order costs one Redis round trip per retry rather than one per
   * segment; or a holder of this process served the order in its own hold. Null once no busy
   * segment is left that could hold q.
   */
  private async waitForBusy(search: Search, segments: number[], waitUntil: number): Promise<OrderRow | null> {
    const { product, req } = search;
    const busy = new Set(segments);
    const rotation = { turn: 0 };
    const started = Date.now();
    while (busy.size > 0) {
      if (Date.now() >= waitUntil) {
        throw new BusyError(
          `every segment with stock stayed locked for ${this.lockConfig.waitMs} ms`,
          this.http.retryAfterS,
        );
      }
      const end = await this.segmentLocking.wait(product.id, req, this.segmentLocking.waitsPatiently(product.id, busy));
      const woke =
        end.kind === 'served'
          ? servedAnswer(end.answer, req.quantity)
          : await this.segmentLocking.tryOneBusy(product, req, busy, end, rotation);
      switch (woke.kind) {
        case 'sold':
          this.metrics.lockWaitSeconds.observe((Date.now() - started) / 1000);
          return woke.order;
        case 'empty':
          busy.delete(woke.segment);
          this.metrics.fallovers.inc({ reason: 'empty' });
          break;
        case 'unreachable':
          busy.delete(woke.segment);
          search.down.add(woke.segment);
          this.metrics.fallovers.inc({ reason: 'unreachable' });
          break;
        case 'again':
          break;
        default:
          return unreachable(woke);
      }
    }
    return null;
  }

  /** PostgreSQL's word on what is left: sold out when it is less than q (flagged when nothing is left), else the layout. */
  private async authoritativeLayout(search: Search): Promise<{ kind: 'layout'; layout: Layout } | SoldOut> {
    const { product, req } = search;
    this.metrics.authoritativeChecks.inc();
    const layout = await this.stock.readLayout(product.id);
    if (!layout) return { kind: 'soldOut', remaining: 0, fromHint: false }; // deleted under us: nothing to sell
    const remaining = layout.segments.reduce((sum, s) => sum + s.stock, 0);
    if (remaining < req.quantity) {
      if (remaining === 0) await this.segmentLocking.soldOut(product.id, search.pass);
      return { kind: 'soldOut', remaining, fromHint: false };
    }
    return { kind: 'layout', layout };
  }

  /** q over several segments, the fullest first; null when they no longer hold q between them. */
  private async sellSpread(search: Search, segments: Array<{ idx: number; stock: number }>): Promise<OrderRow | null> {
    const picked = pickSegmentsFor(search.req.quantity, segments);
    if (!picked) return null;
    return this.segmentLocking.sellSpread(search.product, picked, search.req);
  }

  /** The units are there, behind a Redis Cluster master that does not answer: UNAVAILABLE, not SOLD_OUT. */
  private refuseIfBehindDownMasters(search: Search, reachable: Array<{ idx: number; stock: number }>): void {
    if (search.down.size > 0 && reachable.reduce((sum, s) => sum + s.stock, 0) < search.req.quantity) {
      throw new UnavailableError(
        'redis',
        this.http.retryAfterS,
        new Error(`segments ${[...search.down].join(', ')}: lock master unreachable`),
      );
    }
  }
}

/** An order id as the path gives it: a positive bigint in decimal, else ORDER_NOT_FOUND. */
function orderId(raw: string): string {
  if (!/^[1-9][0-9]{0,17}$/.test(raw)) throw new OrderNotFoundError(raw);
  return raw;
}
