// The order path against fakes: a small in-memory stock of segments, a lock table where a test can
// hold any key, and hints. Math.random is stubbed wherever the start segment matters.
import { HttpConfig, LocksConfig } from '../config/app-config';
import {
  AdmissionInvalidError,
  AdmissionRequiredError,
  AlreadyOrderedError,
  BusyError,
  OrderInProgressError,
  OrderNotFoundError,
  QuantityOverLimitError,
  SaleEndedError,
  SaleNotStartedError,
  SoldOutError,
  UnavailableError,
} from '../common/domain-errors';
import { ProductInfo } from '../inventory/product.types';
import { takeFrom } from '../inventory/segment-plan';
import { Layout, StockRepository } from '../inventory/stock.repository';
import { BoardAnswer, SoldOutBoardService } from '../inventory/sold-out-board.service';
import {
  BatchAttempt,
  BatchResult,
  Fenced,
  OrderRow,
  SegmentAttempt,
  UncertainBatch,
  UncertainWrite,
} from './order.types';
import { OrderReadsRepository } from './repositories/order-reads.repository';
import { OutcomesRepository } from './repositories/outcomes.repository';
import { SaleWritesRepository } from './repositories/sale-writes.repository';
import { OrdersService } from './orders.service';
import { SegmentLockingService } from './sale/segment-locking.service';
import type { AdmissionsService } from '../admissions/admissions.service';

const PRODUCT = 7;

interface World {
  service: OrdersService;
  config: Slices;
  stocks: number[];
  busy: Set<string>;
  down: Set<string>;
  catalog: { get: jest.Mock; remember: jest.Mock };
  hints: { read: jest.Mock; markEmpty: jest.Mock; markSoldOut: jest.Mock; stockReturned: jest.Mock };
  stock: jest.Mocked<Pick<StockRepository, 'readLayout'>>;
  board: jest.Mocked<Pick<SoldOutBoardService, 'soldOutFor' | 'forget'>>;
  /** The order repositories the sale reaches, as one fake: sale writes, reads by key or id, and settling. */
  orders: jest.Mocked<
    Pick<SaleWritesRepository, 'sellFromSegment' | 'sellFromSegments' | 'sellBatch'> &
      Pick<OrderReadsRepository, 'findByKey' | 'findById'> &
      Pick<OutcomesRepository, 'settle'>
  >;
  locks: {
    tryAcquire: jest.Mock;
    acquireWithin: jest.Mock;
    release: jest.Mock;
    raiseFence: jest.Mock;
    backoff: jest.Mock;
    backoffMs: jest.Mock;
  };
  /** Called once per pause between retries of busy segments, however the service pauses. */
  onWait: jest.Mock;
  metrics: Record<string, { inc: jest.Mock; observe: jest.Mock }>;
  room: jest.Mocked<Pick<AdmissionsService, 'check'>>;
}

/** The configuration slices OrdersService reads; a test overrides single fields. */
interface Slices {
  locks: LocksConfig;
  http: HttpConfig;
}
type SliceOverrides = { [K in keyof Slices]?: Partial<Slices[K]> };

function world(opts: {
  stocks: number[];
  limitPerUser?: number;
  config?: SliceOverrides;
  info?: Partial<ProductInfo>;
  layoutVersion?: number;
  ordered?: string[];
  /** Redis Cluster: a lock failure is one master's, and only its segments are down. */
  cluster?: boolean;
}): World {
  const config = {
    locks: {
      waitMs: 30,
      ttlMs: 1000,
      userTtlMs: 1000,
      batchMax: 32,
      holdsMax: 4,
      ...opts.config?.locks,
    },
    http: { retryAfterS: 3, ...opts.config?.http },
  } as Slices;
  const stocks = [...opts.stocks];
  const info: ProductInfo = {
    id: PRODUCT,
    name: 'Sneaker',
    limitPerUser: opts.limitPerUser ?? 1,
    segmentCount: stocks.length,
    layoutVersion: 1,
    startsAt: null,
    endsAt: null,
    waitingRoom: false,
    admissionTtlS: 120,
    ...opts.info,
  };
  let nextId = 100;
  const row = (userId: string, quantity: number, allocations: OrderRow['allocations']): OrderRow => ({
    id: nextId++,
    productId: PRODUCT,
    userId,
    quantity,
    allocations,
    status: 'reserved',
    createdAt: new Date(),
    expiresAt: new Date(Date.now() + 900_000),
  });
  const busy = new Set<string>();
  /** Lock keys whose master does not answer (UNAVAILABLE). */
  const down = new Set<string>();
  const orders = new Set<string>(opts.ordered ?? []);
  const onWait = jest.fn();
  const catalog = { get: jest.fn(async () => ({ ...info })), remember: jest.fn((p: ProductInfo) => p) };
  const hints = {
    read: jest.fn(async (_productId: number, _layoutVersion: number) => ({ soldOut: false, empty: new Set<number>() })),
    markEmpty: jest.fn(async () => undefined),
    markSoldOut: jest.fn(async () => undefined),
    stockReturned: jest.fn(async () => undefined),
  };
  const existing = (userId: string): OrderRow | null =>
    orders.has(userId) ? row(userId, 1, [{ segment: 0, quantity: 1 }]) : null;
  const stock: World['stock'] = {
    readLayout: jest.fn(async (_productId: number): Promise<Layout | null> => ({
      version: opts.layoutVersion ?? 1,
      segmentCount: stocks.length,
      segments: stocks.map((s, idx) => ({ idx, stock: s })),
    })),
  };
  const ordersRepo: World['orders'] = {
    // The batch statement's contract: smallest quantities first while they fit, users who hold an
    // order refused without failing the rest, the segment deducted by what was sold.
    sellBatch: jest.fn(
      async (
        _p: number,
        idx: number,
        _token: number,
        entries: Array<{ userId: string; quantity: number }>,
      ): Promise<BatchAttempt> => {
        if (idx >= stocks.length)
          return { kind: 'decided', results: entries.map(() => ({ kind: 'short' as const })), remaining: null };
        const results: BatchResult[] = entries.map(() => ({ kind: 'short' as const }));
        const byQuantity = entries.map((e, i) => ({ ...e, i })).sort((a, b) => a.quantity - b.quantity || a.i - b.i);
        let left = stocks[idx];
        for (const e of byQuantity) {
          if (orders.has(e.userId)) {
            results[e.i] = { kind: 'alreadyOrdered' };
            continue;
          }
          if (e.quantity > left) break;
          left -= e.quantity;
          orders.add(e.userId);
          results[e.i] = { kind: 'sold', order: row(e.userId, e.quantity, [{ segment: idx, quantity: e.quantity }]) };
        }
        stocks[idx] = left;
        return { kind: 'decided', results, remaining: left };
      },
    ),
    sellFromSegment: jest.fn(
      async (_p: number, idx: number, _token: number, q: number, userId: string): Promise<SegmentAttempt | Fenced> => {
        if (idx >= stocks.length) return { kind: 'short', remaining: null };
        if (stocks[idx] < q) return { kind: 'short', remaining: stocks[idx] };
        stocks[idx] -= q;
        return { kind: 'sold', order: row(userId, q, [{ segment: idx, quantity: q }]), remaining: stocks[idx] };
      },
    ),
    sellFromSegments: jest.fn(async (_p: number, indexes: number[], _tokens: number[], q: number, userId: string) => {
      const takes = takeFrom(
        q,
        indexes.map((idx) => ({ idx, stock: stocks[idx] })),
      );
      if (!takes) return null;
      for (const t of takes) stocks[t.segment] -= t.quantity;
      return row(userId, q, takes);
    }),
    findByKey: jest.fn(async (_productId: number, userId: string) => existing(userId)),
    findById: jest.fn(async (_id: string): Promise<OrderRow | null> => null),
    settle: jest.fn(async (_w: UncertainWrite): Promise<OrderRow> => {
      throw new Error('settle is not expected in this test');
    }),
  };
  // Each take of a lock draws the next fencing token.
  let tokens = 0;
  const locks = {
    tryAcquire: jest.fn(async (key: string, _ttlMs?: number, _fenceKey?: string) => {
      if (down.has(key)) throw new UnavailableError('redis', config.http.retryAfterS);
      return busy.has(key) ? null : { key, token: ++tokens };
    }),
    acquireWithin: jest.fn(async (key: string) => {
      if (busy.has(key)) throw new BusyError(`lock ${key} stayed busy`, config.http.retryAfterS);
      return { key, token: ++tokens };
    }),
    release: jest.fn(async (_held: unknown) => undefined),
    raiseFence: jest.fn(async (_fenceKey: string, _fence: number) => undefined),
    // The pause is either slept by the lock service or timed by the caller from backoffMs().
    backoff: jest.fn(async () => {
      onWait();
      await new Promise<void>((r) => setTimeout(r, 2));
    }),
    backoffMs: jest.fn(() => {
      onWait();
      return 2;
    }),
  };
  // RedisReachability over the fakes: on a cluster the keys in `down` live on one dead master, the rest on a live one.
  const remembered = new Set<string>();
  const reach = {
    sharded: opts.cluster ?? false,
    masterOf: (key: string) => (opts.cluster ? (down.has(key) ? 'dead:7000' : 'live:7001') : 'quorum'),
    isDown: (master: string) => remembered.has(master),
    markDown: (master: string) => remembered.add(master),
    markUp: (master: string) => remembered.delete(master),
  };
  const metric = () => ({ inc: jest.fn(), observe: jest.fn() });
  const metrics: World['metrics'] = {};
  for (const name of [
    'orders',
    'orderSeconds',
    'lockWaitSeconds',
    'lockBusy',
    'lockAttempts',
    'fallovers',
    'soldOutShortCircuits',
    'staleSoldOutFlags',
    'authoritativeChecks',
    'rebalances',
    'dependencyErrors',
    'lockExtensions',
    'batchSize',
    'orderTransitions',
    'unitsReturned',
  ]) {
    metrics[name] = metric();
  }
  // The gate is one Lua call in Redis (sold-out flag, user lock, hints); here it is faked from the
  // same lock table and hints, with the real gate's degraded pass when the hints cannot be read.
  const gate = {
    enter: jest.fn(async (p: ProductInfo, userId: string) => {
      let h: { soldOut: boolean; empty: Set<number> };
      try {
        h = await hints.read(p.id, p.layoutVersion);
      } catch {
        metrics.dependencyErrors.inc({ dependency: 'redis' });
        return { kind: 'open' as const, pass: { userId, token: null, empty: new Set<number>(), generation: null } };
      }
      if (h.soldOut) {
        metrics.soldOutShortCircuits.inc();
        return { kind: 'soldOut' as const };
      }
      const held = await locks.tryAcquire(`lock:order:${userId}`, config.locks.userTtlMs);
      if (!held) throw new OrderInProgressError();
      return { kind: 'open' as const, pass: { userId, token: held, empty: h.empty, generation: 0 } };
    }),
    leave: jest.fn(async (pass: { token: unknown }) => {
      if (pass.token) await locks.release(pass.token);
    }),
  };
  // The segment locking the module provides, built over the same fakes.
  const locking = new SegmentLockingService(
    config.locks,
    gate as never,
    hints as never,
    locks as never,
    reach as never,
    ordersRepo as never,
    metrics as never,
  );
  // The board's read over the same stock: units left with the layout, or nothing left and the buyer's order.
  const board: World['board'] = {
    soldOutFor: jest.fn(async (_p: number, userId: string, _asked: number): Promise<BoardAnswer> => {
      const remaining = stocks.reduce((a, b) => a + b, 0);
      const withStock = stocks.flatMap((n, idx) => (n > 0 ? [idx] : []));
      if (remaining > 0) return { kind: 'units_left', remaining, layoutVersion: opts.layoutVersion ?? 1, withStock };
      const held = existing(userId);
      return held ? { kind: 'already_ordered', orderId: held.id } : { kind: 'sold_out' };
    }),
    forget: jest.fn(),
  };
  // An admission checked by the waiting room (its own specs cover the checks) names position 42.
  const room: World['room'] = {
    check: jest.fn<Promise<number>, [number, string, string | undefined]>(async () => 42),
  };
  const service = new OrdersService(
    config.locks,
    config.http,
    catalog as never,
    locking,
    stock as never,
    ordersRepo as never,
    ordersRepo as never,
    ordersRepo as never,
    hints as never,
    board as never,
    metrics as never,
    room as never,
  );
  return {
    service,
    board,
    config,
    stocks,
    busy,
    down,
    catalog,
    hints,
    stock,
    orders: ordersRepo,
    locks,
    metrics,
    onWait,
    room,
  };
}

const seg = (idx: number) => `lock:stock:${PRODUCT}:${idx}`;
const userLock = (userId: string) => `lock:order:${userId}`;
const triedSegments = (w: World) => w.orders.sellFromSegment.mock.calls.map((c) => c[1]);
const acquiredKeys = (w: World) => w.locks.tryAcquire.mock.calls.map((c) => c[0] as string);

/** Makes randomStart pick `start` of `count` segments. */
function startAt(start: number, count: number): void {
  jest.spyOn(Math, 'random').mockReturnValue((start + 0.5) / count);
}

afterEach(() => jest.restoreAllMocks());

describe('OrdersService.place', () => {
  describe('single segments', () => {
    it('should sell from the randomly chosen segment under its lock, inside the user lock', async () => {
      const w = world({ stocks: [5, 5, 5, 5] });
      startAt(2, 4);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(order.allocations).toEqual([{ segment: 2, quantity: 1 }]);
      expect(w.stocks).toEqual([5, 5, 4, 5]);
      expect(acquiredKeys(w)).toEqual([userLock('u1'), seg(2)]);
      expect(w.locks.release.mock.calls.map((c) => c[0].key)).toEqual([seg(2), userLock('u1')]);
      expect(w.stock.readLayout).not.toHaveBeenCalled();
    });

    it('should fall over to the next segment when the chosen segment is locked by another order', async () => {
      const w = world({ stocks: [5, 5, 5, 5] });
      w.busy.add(seg(2));
      startAt(2, 4);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(order.allocations).toEqual([{ segment: 3, quantity: 1 }]);
      expect(triedSegments(w)).toEqual([3]);
      expect(w.stocks).toEqual([5, 5, 5, 4]);
      expect(w.metrics.fallovers.inc).toHaveBeenCalledWith({ reason: 'busy' });
      expect(w.onWait).not.toHaveBeenCalled();
    });

    it('should wrap around to segment 0 when the last segment is busy', async () => {
      const w = world({ stocks: [5, 5, 5] });
      w.busy.add(seg(2));
      startAt(2, 3);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(order.allocations).toEqual([{ segment: 0, quantity: 1 }]);
    });

    it('should mark an empty segment in the hints, release its lock and move on to the next', async () => {
      const w = world({ stocks: [0, 5, 5] });
      startAt(0, 3);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(order.allocations).toEqual([{ segment: 1, quantity: 1 }]);
      expect(triedSegments(w)).toEqual([0, 1]);
      expect(w.hints.markEmpty).toHaveBeenCalledWith(PRODUCT, 1, 0);
      expect(w.hints.markEmpty).toHaveBeenCalledTimes(1);
      expect(w.locks.release.mock.calls.map((c) => c[0].key)).toContain(seg(0));
      expect(w.metrics.fallovers.inc).toHaveBeenCalledWith({ reason: 'empty' });
    });

    it('should mark the segment it just emptied', async () => {
      const w = world({ stocks: [1, 5] });
      startAt(0, 2);
      await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(w.hints.markEmpty).toHaveBeenCalledWith(PRODUCT, 1, 0);
    });

    it('should pass over a segment too small for the quantity without marking it empty', async () => {
      const w = world({ stocks: [1, 5], limitPerUser: 3 });
      startAt(0, 2);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 2 });
      expect(order.allocations).toEqual([{ segment: 1, quantity: 2 }]);
      expect(w.hints.markEmpty).not.toHaveBeenCalled();
      expect(w.stocks).toEqual([1, 3]);
    });

    it('should not visit segments the hints say are empty', async () => {
      const w = world({ stocks: [0, 0, 5, 5] });
      w.hints.read.mockResolvedValue({ soldOut: false, empty: new Set([0, 1]) });
      startAt(0, 4);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(triedSegments(w)).toEqual([2]);
      expect(order.allocations).toEqual([{ segment: 2, quantity: 1 }]);
    });

    it('should ignore a mark-empty hint that fails to write', async () => {
      const w = world({ stocks: [0, 5] });
      w.hints.markEmpty.mockRejectedValue(new Error('redis down'));
      startAt(0, 2);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(order.allocations).toEqual([{ segment: 1, quantity: 1 }]);
      await new Promise((r) => setImmediate(r));
      expect(w.metrics.dependencyErrors.inc).toHaveBeenCalledWith({ dependency: 'redis' });
    });
  });

  describe('Redis Cluster: a segment whose lock master does not answer', () => {
    it('should fall over past a segment whose master is unreachable and sell from one on a live master', async () => {
      const w = world({ stocks: [5, 5, 5], cluster: true });
      w.down.add(seg(1));
      startAt(1, 3);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(order.allocations).toEqual([{ segment: 2, quantity: 1 }]);
      expect(w.stocks).toEqual([5, 5, 4]);
      expect(w.metrics.fallovers.inc).toHaveBeenCalledWith({ reason: 'unreachable' });
      expect(w.metrics.lockAttempts.inc).toHaveBeenCalledWith({ master: 'dead:7000', outcome: 'unreachable' });
      expect(w.metrics.lockAttempts.inc).toHaveBeenCalledWith({ master: 'live:7001', outcome: 'acquired' });
    });

    it('should pass over a segment found unreachable without asking Redis again for a while', async () => {
      const w = world({ stocks: [5, 5, 5], cluster: true });
      w.down.add(seg(1));
      startAt(1, 3);
      await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      await w.service.place({ userId: 'u2', productId: PRODUCT, quantity: 1 });
      expect(acquiredKeys(w).filter((k) => k === seg(1))).toHaveLength(1);
      expect(w.stocks).toEqual([5, 5, 3]);
    });

    it('should answer UNAVAILABLE, not SOLD_OUT, when the units left are all behind an unreachable master', async () => {
      const w = world({ stocks: [0, 4, 0], cluster: true });
      w.down.add(seg(1));
      startAt(0, 3);
      const err = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(UnavailableError);
      expect((err as UnavailableError).retryAfterS).toBe(3);
      expect(w.stocks).toEqual([0, 4, 0]);
    });

    it('should still answer SOLD_OUT when PostgreSQL says no units are left, whatever master is unreachable', async () => {
      const w = world({ stocks: [0, 0, 0], cluster: true });
      w.down.add(seg(1));
      startAt(0, 3);
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        SoldOutError,
      );
    });

    it('should take an unreachable lock master for a lost Redis outside a cluster: UNAVAILABLE at once, no fall-over', async () => {
      const w = world({ stocks: [5, 5, 5] });
      w.down.add(seg(1));
      startAt(1, 3);
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        UnavailableError,
      );
      expect(w.stocks).toEqual([5, 5, 5]);
    });
  });

  describe('sale window', () => {
    it('should answer SALE_NOT_STARTED with the seconds until the start as Retry-After, touching no lock and no segment', async () => {
      const w = world({ stocks: [5], info: { startsAt: Date.now() + 90_500 } });
      const err = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SaleNotStartedError);
      expect((err as SaleNotStartedError).retryAfterS).toBeGreaterThanOrEqual(90);
      expect((err as SaleNotStartedError).retryAfterS).toBeLessThanOrEqual(91);
      expect(w.locks.tryAcquire).not.toHaveBeenCalled();
      expect(w.orders.sellFromSegment).not.toHaveBeenCalled();
    });

    it('should answer SALE_ENDED from endsAt on, touching no lock and no segment', async () => {
      const w = world({ stocks: [5], info: { startsAt: Date.now() - 10_000, endsAt: Date.now() - 1 } });
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        SaleEndedError,
      );
      expect(w.locks.tryAcquire).not.toHaveBeenCalled();
      expect(w.orders.sellFromSegment).not.toHaveBeenCalled();
    });

    it('should sell inside the window', async () => {
      const w = world({ stocks: [5], info: { startsAt: Date.now() - 1000, endsAt: Date.now() + 60_000 } });
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).resolves.toMatchObject({
        status: 'reserved',
      });
    });
  });

  describe('sold out', () => {
    it('should answer SOLD_OUT only after the authoritative read says nothing remains, and set the flag', async () => {
      const w = world({ stocks: [0, 0, 0] });
      startAt(1, 3);
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        SoldOutError,
      );
      expect(triedSegments(w)).toEqual([1, 2, 0]);
      expect(w.stock.readLayout).toHaveBeenCalledTimes(1);
      const lastTake = Math.max(...w.orders.sellFromSegment.mock.invocationCallOrder);
      expect(w.stock.readLayout.mock.invocationCallOrder[0]).toBeGreaterThan(lastTake);
      expect(w.hints.markSoldOut).toHaveBeenCalledWith(PRODUCT, 0);
      expect(w.locks.release.mock.calls.map((c) => c[0].key)).toContain(userLock('u1'));
    });

    it('should not set the sold-out flag without the stock generation of a gate that answered (hint Redis away)', async () => {
      const w = world({ stocks: [0, 0] });
      w.hints.read.mockRejectedValue(new Error('redis down'));
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        SoldOutError,
      );
      expect(w.hints.markSoldOut).not.toHaveBeenCalled();
    });

    it('should answer SOLD_OUT naming the units left when fewer than asked remain, without the sold-out flag', async () => {
      const w = world({ stocks: [1, 0, 0], limitPerUser: 3 });
      startAt(0, 3);
      const err = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 2 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SoldOutError);
      expect((err as Error).message).toContain('only 1 left');
      expect(w.hints.markSoldOut).not.toHaveBeenCalled();
      expect(w.stocks).toEqual([1, 0, 0]);
    });

    it('should sell, not answer SOLD_OUT, when stale hints call every segment empty but PostgreSQL has stock', async () => {
      const w = world({ stocks: [0, 0, 4, 0] });
      w.hints.read.mockResolvedValue({ soldOut: false, empty: new Set([0, 1, 2, 3]) });
      startAt(0, 4);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(order.allocations).toEqual([{ segment: 2, quantity: 1 }]);
      expect(w.stock.readLayout).toHaveBeenCalledTimes(1);
      expect(w.hints.markSoldOut).not.toHaveBeenCalled();
    });

    it("should answer SOLD_OUT from the sold-out flag, checked by the board's read, without taking the user lock or touching a segment", async () => {
      const w = world({ stocks: [0, 0] });
      w.hints.read.mockResolvedValue({ soldOut: true, empty: new Set() });
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        SoldOutError,
      );
      expect(w.locks.tryAcquire).not.toHaveBeenCalled();
      expect(w.orders.sellFromSegment).not.toHaveBeenCalled();
      expect(w.board.soldOutFor).toHaveBeenCalledTimes(1);
      expect(w.stock.readLayout).not.toHaveBeenCalled();
      expect(w.orders.findByKey).not.toHaveBeenCalled();
      expect(w.metrics.soldOutShortCircuits.inc).toHaveBeenCalled();
      expect(w.board.soldOutFor).toHaveBeenCalledWith(PRODUCT, 'u1', expect.any(Number));
    });

    it("should answer SOLD_OUT from the sold-out board's shared read, with no read of its own, asking for one sent after the request began", async () => {
      const w = world({ stocks: [0, 0] });
      w.hints.read.mockResolvedValue({ soldOut: true, empty: new Set() });
      w.board.soldOutFor.mockResolvedValue({ kind: 'sold_out' });
      const began = Date.now();
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        SoldOutError,
      );
      expect(w.stock.readLayout).not.toHaveBeenCalled();
      expect(w.orders.findByKey).not.toHaveBeenCalled();
      const asked = w.board.soldOutFor.mock.calls[0][2];
      expect(asked).toBeGreaterThanOrEqual(began);
    });

    it("should answer ALREADY_ORDERED with the order the sold-out board's read found for the buyer", async () => {
      const w = world({ stocks: [0, 0] });
      w.hints.read.mockResolvedValue({ soldOut: false, empty: new Set() });
      w.board.soldOutFor.mockResolvedValue({ kind: 'already_ordered', orderId: 42 });
      startAt(0, 2);
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toMatchObject({
        code: 'ALREADY_ORDERED',
        orderId: 42,
      });
      expect(w.orders.findByKey).not.toHaveBeenCalled();
    });

    it('should clear a sold-out flag that PostgreSQL contradicts (its clearing was lost) and sell', async () => {
      const w = world({ stocks: [0, 3] });
      w.hints.read.mockResolvedValue({ soldOut: true, empty: new Set() });
      w.hints.stockReturned.mockImplementation(async () => {
        w.hints.read.mockResolvedValue({ soldOut: false, empty: new Set() });
        return 1;
      });
      startAt(0, 2);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(order.allocations).toEqual([{ segment: 1, quantity: 1 }]);
      expect(w.hints.stockReturned).toHaveBeenCalledWith(PRODUCT, 1, [1]);
      expect(w.metrics.staleSoldOutFlags.inc).toHaveBeenCalledTimes(1);
      expect(w.board.soldOutFor).toHaveBeenCalledTimes(1);
    });

    it('should answer ALREADY_ORDERED instead of SOLD_OUT to a user who holds an order of the sold-out product', async () => {
      const w = world({ stocks: [0], ordered: ['u1'] });
      w.hints.read.mockResolvedValue({ soldOut: true, empty: new Set() });
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        AlreadyOrderedError,
      );
      await expect(w.service.place({ userId: 'u2', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        SoldOutError,
      );
      // The board's read knew both: no lookup of their own.
      expect(w.board.soldOutFor).toHaveBeenCalledTimes(2);
      expect(w.orders.findByKey).not.toHaveBeenCalled();
    });

    it("should look the buyer's order up itself when the board holds too many holders to tell, and answer the board's failure as it came", async () => {
      const w = world({ stocks: [0], ordered: ['u1'] });
      w.hints.read.mockResolvedValue({ soldOut: true, empty: new Set() });
      w.board.soldOutFor.mockResolvedValueOnce({ kind: 'nothing_left' });
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        AlreadyOrderedError,
      );
      expect(w.orders.findByKey).toHaveBeenCalledTimes(1);
      const down = new UnavailableError('postgres', 1);
      w.board.soldOutFor.mockResolvedValueOnce({ kind: 'failed', error: down });
      await expect(w.service.place({ userId: 'u2', productId: PRODUCT, quantity: 1 })).rejects.toBe(down);
    });

    it('should not look for an existing order on the selling path', async () => {
      const w = world({ stocks: [5] });
      await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(w.orders.findByKey).not.toHaveBeenCalled();
    });

    it('should answer SOLD_OUT when the product vanished under the order', async () => {
      const w = world({ stocks: [0] });
      w.stock.readLayout.mockResolvedValue(null);
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        SoldOutError,
      );
    });
  });

  describe('several segments', () => {
    it('should spread q over the fullest segments, locking them in ascending order, when no single one holds q', async () => {
      const w = world({ stocks: [1, 2, 0, 2], limitPerUser: 3 });
      startAt(0, 4);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 3 });
      expect(w.locks.acquireWithin.mock.calls.map((c) => c[0])).toEqual([seg(1), seg(3)]);
      expect(w.orders.sellFromSegments).toHaveBeenCalledWith(
        PRODUCT,
        [1, 3],
        [expect.any(Number), expect.any(Number)],
        3,
        'u1',
        undefined,
      );
      expect(order.quantity).toBe(3);
      expect(order.allocations).toEqual([
        { segment: 1, quantity: 2 },
        { segment: 3, quantity: 1 },
      ]);
      expect(w.stocks).toEqual([1, 0, 0, 1]);
      const released = w.locks.release.mock.calls.map((c) => c[0].key);
      expect(released).toEqual(expect.arrayContaining([seg(1), seg(3), userLock('u1')]));
    });

    it('should release the segment locks it holds when a later segment lock stays busy', async () => {
      const w = world({ stocks: [2, 2, 0], limitPerUser: 4 });
      // Free for the single tries (too small anyway), then taken by someone else during the spread.
      w.locks.acquireWithin.mockImplementation(async (key: string) => {
        if (key === seg(1)) throw new BusyError(`lock ${key} stayed busy`, 3);
        return { key };
      });
      startAt(0, 3);
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 3 })).rejects.toBeInstanceOf(
        BusyError,
      );
      const released = w.locks.release.mock.calls.map((c) => c[0].key);
      expect(w.locks.acquireWithin.mock.calls.map((c) => c[0])).toEqual([seg(0), seg(1)]);
      expect(released.filter((k) => k === seg(0))).toHaveLength(2); // once after the single try, once after the spread
      expect(released).toContain(userLock('u1'));
      expect(w.orders.sellFromSegments).not.toHaveBeenCalled();
      expect(w.stocks).toEqual([2, 2, 0]);
    });
  });

  describe('user lock', () => {
    it('should answer ORDER_IN_PROGRESS when the user lock is held, touching no segment', async () => {
      const w = world({ stocks: [5, 5] });
      w.busy.add(userLock('u1'));
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        OrderInProgressError,
      );
      expect(w.orders.sellFromSegment).not.toHaveBeenCalled();
      expect(w.locks.release).not.toHaveBeenCalled();
      expect(w.stocks).toEqual([5, 5]);
    });

    it.each([
      ['ALREADY_ORDERED', new AlreadyOrderedError()],
      ['an unexpected error', new Error('boom')],
    ])('should release the user lock and the segment lock when the sale fails with %s', async (_name, failure) => {
      const w = world({ stocks: [5, 5] });
      w.orders.sellFromSegment.mockRejectedValue(failure);
      startAt(0, 2);
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBe(failure);
      const released = w.locks.release.mock.calls.map((c) => c[0].key);
      expect(released).toEqual([seg(0), userLock('u1')]);
    });

    it('should settle a sale whose reply was lost before answering, still inside the user lock', async () => {
      const w = world({ stocks: [5] });
      const uncertain = new UncertainWrite(PRODUCT, 'u1', 1, [0], 'tag', process.hrtime.bigint(), new Error('lost'));
      w.orders.sellFromSegment.mockRejectedValue(uncertain);
      const settled = {
        id: 9,
        productId: PRODUCT,
        userId: 'u1',
        quantity: 1,
        allocations: [{ segment: 0, quantity: 1 }],
        status: 'reserved' as const,
        createdAt: new Date(),
        expiresAt: new Date(),
      };
      w.orders.settle.mockResolvedValue(settled);
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).resolves.toBe(settled);
      expect(w.orders.settle).toHaveBeenCalledWith(uncertain);
      const userLockReleased =
        w.locks.release.mock.invocationCallOrder[
          w.locks.release.mock.calls.findIndex((c) => c[0].key === userLock('u1'))
        ];
      expect(w.orders.settle.mock.invocationCallOrder[0]).toBeLessThan(userLockReleased);
    });

    it('should name the existing order in ALREADY_ORDERED when the unique key refused the sale', async () => {
      const w = world({ stocks: [5], ordered: ['u1'] });
      w.orders.sellFromSegment.mockRejectedValue(new AlreadyOrderedError());
      const err = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(AlreadyOrderedError);
      expect((err as AlreadyOrderedError).orderId).toEqual(expect.any(Number));
    });

    it('should release the user lock when the authoritative read fails', async () => {
      const w = world({ stocks: [0] });
      w.stock.readLayout.mockRejectedValue(new UnavailableError('postgres', 3));
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        UnavailableError,
      );
      expect(w.locks.release.mock.calls.map((c) => c[0].key)).toContain(userLock('u1'));
    });
  });

  describe('bounded wait', () => {
    it('should answer BUSY with Retry-After when every segment stays locked past lockWaitMs', async () => {
      const w = world({ stocks: [5, 5, 5], config: { locks: { waitMs: 30 }, http: { retryAfterS: 4 } } });
      for (let i = 0; i < 3; i++) w.busy.add(seg(i));
      startAt(0, 3);
      const started = Date.now();
      const err = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BusyError);
      expect((err as BusyError).retryAfterS).toBe(4);
      expect(Date.now() - started).toBeGreaterThanOrEqual(30);
      expect(w.onWait).toHaveBeenCalled();
      const segmentTries = acquiredKeys(w).filter((k) => k.startsWith('lock:stock:'));
      expect(segmentTries.length).toBeGreaterThan(3);
      expect(w.orders.sellFromSegment).not.toHaveBeenCalled();
      expect(w.stock.readLayout).not.toHaveBeenCalled();
      expect(w.locks.release.mock.calls.map((c) => c[0].key)).toEqual([userLock('u1')]);
    });

    it('should answer BUSY at once with lockWaitMs 0, after one pass over the segments', async () => {
      const w = world({ stocks: [5, 5], config: { locks: { waitMs: 0 } } });
      w.busy.add(seg(0)).add(seg(1));
      startAt(0, 2);
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        BusyError,
      );
      expect(acquiredKeys(w).filter((k) => k.startsWith('lock:stock:'))).toEqual([seg(0), seg(1)]);
      expect(w.onWait).not.toHaveBeenCalled();
    });

    it('should retry only the busy segments, one per wake-up, and sell from one that frees up within the wait', async () => {
      const w = world({ stocks: [0, 5, 5], config: { locks: { waitMs: 1000 } } });
      w.busy.add(seg(1)).add(seg(2));
      w.onWait.mockImplementation(() => {
        if (w.onWait.mock.calls.length === 2) w.busy.delete(seg(2));
      });
      startAt(0, 3);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(order.allocations).toEqual([{ segment: 2, quantity: 1 }]);
      // segment 0 was tried once (empty); after that only 1 and 2 were attempted
      expect(triedSegments(w)).toEqual([0, 2]);
      const attempts = w.locks.tryAcquire.mock.calls
        .map((c: unknown[]) => c[0] as string)
        .filter((k) => k.startsWith('lock:stock:'));
      expect(attempts.slice(3).every((k) => k === seg(1) || k === seg(2))).toBe(true);
      // the first pass tries all three; every wake-up after it makes exactly one attempt
      expect(attempts.length).toBe(3 + w.onWait.mock.calls.length);
      expect(w.metrics.lockWaitSeconds.observe).toHaveBeenCalled();
    });
  });

  describe('layout and validation', () => {
    it('should adopt a changed layout from the authoritative read and sell from a segment it did not know', async () => {
      const w = world({ stocks: [0, 0, 0, 5], info: { segmentCount: 2, layoutVersion: 1 }, layoutVersion: 2 });
      startAt(0, 2);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(order.allocations).toEqual([{ segment: 3, quantity: 1 }]);
      expect(w.catalog.remember).toHaveBeenCalledWith(
        expect.objectContaining({ id: PRODUCT, segmentCount: 4, layoutVersion: 2 }),
      );
    });

    it('should go on past the layout rounds while returned units show up and other orders take them first, and sell the one that stays', async () => {
      const w = world({ stocks: [0, 0], config: { locks: { waitMs: 1000 } } });
      // Every read sees a unit in segment 1 that is gone when this order locks it; the sixth one stays.
      w.stock.readLayout.mockImplementation(async () => {
        if (w.stock.readLayout.mock.calls.length === 6) w.stocks[1] = 1;
        return {
          version: 1,
          segmentCount: 2,
          segments: [
            { idx: 0, stock: 0 },
            { idx: 1, stock: 1 },
          ],
        };
      });
      startAt(0, 2);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(order.allocations).toEqual([{ segment: 1, quantity: 1 }]);
      expect(w.stock.readLayout).toHaveBeenCalledTimes(6);
      expect(w.stocks).toEqual([0, 0]);
    });

    it('should answer BUSY once units kept going to other orders for lockWaitMs, after the layout rounds', async () => {
      const w = world({ stocks: [0, 0], config: { locks: { waitMs: 30 }, http: { retryAfterS: 4 } } });
      w.stock.readLayout.mockImplementation(async () => ({
        version: 1,
        segmentCount: 2,
        segments: [
          { idx: 0, stock: 0 },
          { idx: 1, stock: 1 },
        ],
      }));
      startAt(0, 2);
      const started = Date.now();
      const err = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BusyError);
      expect((err as BusyError).message).toMatch(/other orders/);
      expect((err as BusyError).retryAfterS).toBe(4);
      expect(Date.now() - started).toBeGreaterThanOrEqual(30);
      expect(w.stock.readLayout.mock.calls.length).toBeGreaterThanOrEqual(4);
      expect(w.locks.release.mock.calls.map((c) => c[0].key)).toContain(userLock('u1'));
    });

    it('should answer BUSY after four layout changes under one order, however long lockWaitMs is', async () => {
      const w = world({ stocks: [0, 0], config: { locks: { waitMs: 60_000 } } });
      let version = 1;
      w.stock.readLayout.mockImplementation(async () => ({
        version: ++version,
        segmentCount: 2,
        segments: [
          { idx: 0, stock: 0 },
          { idx: 1, stock: 1 },
        ],
      }));
      startAt(0, 2);
      const err = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BusyError);
      expect((err as BusyError).message).toMatch(/layout kept changing/);
      expect(w.stock.readLayout).toHaveBeenCalledTimes(4);
    });

    it('should refuse a quantity over the limit before touching Redis or a segment', async () => {
      const w = world({ stocks: [5], limitPerUser: 2 });
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 3 })).rejects.toBeInstanceOf(
        QuantityOverLimitError,
      );
      expect(w.hints.read).not.toHaveBeenCalled();
      expect(w.locks.tryAcquire).not.toHaveBeenCalled();
    });

    it('should carry on without hints when they cannot be read, counting the Redis error', async () => {
      const w = world({ stocks: [5, 5] });
      w.hints.read.mockRejectedValue(new Error('Connection is closed.'));
      startAt(0, 2);
      const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      expect(order.allocations).toEqual([{ segment: 0, quantity: 1 }]);
      expect(w.metrics.dependencyErrors.inc).toHaveBeenCalledWith({ dependency: 'redis' });
    });

    it('should answer UNAVAILABLE naming Redis when neither the gate nor the segment locks can reach Redis, touching no segment', async () => {
      const w = world({ stocks: [5] });
      w.hints.read.mockRejectedValue(new Error('Connection is closed.'));
      w.locks.tryAcquire.mockRejectedValue(new UnavailableError('redis', 3, new Error('Connection is closed.')));
      const err = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(UnavailableError);
      expect((err as UnavailableError).dependency).toBe('redis');
      expect(w.orders.sellFromSegment).not.toHaveBeenCalled();
      expect(w.stocks).toEqual([5]);
    });

    it("should check a waiting room's admission before any lock, and record the position it spends with the order", async () => {
      const w = world({ stocks: [0, 5], info: { waitingRoom: true } });
      startAt(0, 2);
      await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 }, 'the-token');
      expect(w.room.check).toHaveBeenCalledWith(PRODUCT, 'u1', 'the-token');
      expect(w.orders.sellFromSegment).toHaveBeenLastCalledWith(PRODUCT, 1, expect.any(Number), 1, 'u1', 42);
    });

    it('should refuse, before any lock, an order whose admission the waiting room refuses', async () => {
      const w = world({ stocks: [5], info: { waitingRoom: true } });
      w.room.check.mockRejectedValue(new AdmissionRequiredError(PRODUCT));
      await expect(w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 })).rejects.toBeInstanceOf(
        AdmissionRequiredError,
      );
      expect(w.locks.tryAcquire).not.toHaveBeenCalled();
      expect(w.stocks).toEqual([5]);
    });

    it('should refuse an admission sent for a product without a waiting room, changing nothing', async () => {
      const w = world({ stocks: [5] });
      await expect(
        w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 }, 'a-token'),
      ).rejects.toBeInstanceOf(AdmissionInvalidError);
      expect(w.room.check).not.toHaveBeenCalled();
      expect(w.stocks).toEqual([5]);
    });
  });
});

describe('OrdersService.place with group commit', () => {
  /** Places one order per user at once; the segment locks a test holds play "another process". */
  function storm(w: World, users: string[], quantity = 1) {
    return Promise.allSettled(users.map((userId) => w.service.place({ userId, productId: PRODUCT, quantity })));
  }
  const sold = (results: Array<PromiseSettledResult<OrderRow>>) =>
    results.filter((r): r is PromiseFulfilledResult<OrderRow> => r.status === 'fulfilled').map((r) => r.value);
  /** Frees the given segment locks after the orders have queued up behind them. */
  const freeLater = (w: World, ...idx: number[]) => setTimeout(() => idx.forEach((i) => w.busy.delete(seg(i))), 20);
  const releasedKeys = (w: World) => w.locks.release.mock.calls.map((c) => (c[0] as { key: string }).key);

  it('should sell the orders of this process that wait for the product in one lock hold and one statement, each with its own order', async () => {
    const w = world({ stocks: [10], config: { locks: { waitMs: 2000 } } });
    w.busy.add(seg(0));
    freeLater(w, 0);
    const orders = sold(await storm(w, ['u1', 'u2', 'u3', 'u4']));
    expect(orders.map((o) => o.userId).sort()).toEqual(['u1', 'u2', 'u3', 'u4']);
    expect(new Set(orders.map((o) => o.id)).size).toBe(4);
    expect(w.orders.sellBatch).toHaveBeenCalledTimes(1);
    expect(w.orders.sellBatch.mock.calls[0][3]).toHaveLength(4);
    expect(w.orders.sellFromSegment).not.toHaveBeenCalled();
    expect(w.stocks).toEqual([6]);
    // one segment lock for all four, and every user lock released
    expect(releasedKeys(w).filter((k) => k.startsWith('lock:stock:'))).toEqual([seg(0)]);
    expect(releasedKeys(w).filter((k) => k.startsWith('lock:order:'))).toHaveLength(4);
    expect(w.metrics.batchSize.observe).toHaveBeenCalledWith(4);
  });

  it('should sell the orders that fit when the segment runs short and let the rest fall over to another segment', async () => {
    const w = world({ stocks: [2, 10], config: { locks: { waitMs: 2000 } } });
    w.busy.add(seg(0)).add(seg(1));
    freeLater(w, 0);
    // segment 1 frees up only once the first batch has been served
    const batch = w.orders.sellBatch.getMockImplementation() as NonNullable<
      ReturnType<typeof w.orders.sellBatch.getMockImplementation>
    >;
    w.orders.sellBatch.mockImplementationOnce(async (...args) => {
      const first = await batch(...args);
      w.busy.delete(seg(1));
      return first;
    });
    const orders = sold(await storm(w, ['u1', 'u2', 'u3', 'u4']));
    expect(orders).toHaveLength(4);
    expect(orders.filter((o) => o.allocations[0].segment === 0)).toHaveLength(2);
    expect(orders.filter((o) => o.allocations[0].segment === 1)).toHaveLength(2);
    expect(w.stocks).toEqual([0, 8]);
    expect(w.hints.markEmpty).toHaveBeenCalledWith(PRODUCT, 1, 0);
  });

  it('should answer ALREADY_ORDERED to a user in the batch who holds an order, and sell to the others', async () => {
    const w = world({ stocks: [10], ordered: ['u2'], config: { locks: { waitMs: 2000 } } });
    w.busy.add(seg(0));
    freeLater(w, 0);
    const results = await storm(w, ['u1', 'u2', 'u3']);
    expect(results[1]).toEqual({ status: 'rejected', reason: expect.any(AlreadyOrderedError) });
    expect(
      sold(results)
        .map((o) => o.userId)
        .sort(),
    ).toEqual(['u1', 'u3']);
    expect(w.orders.sellBatch).toHaveBeenCalledTimes(1);
    expect(w.stocks).toEqual([8]);
  });

  it('should answer every order of a failed batch with the failure, and release every lock', async () => {
    const w = world({ stocks: [10], config: { locks: { waitMs: 2000 } } });
    w.orders.sellBatch.mockRejectedValue(new UnavailableError('postgres', 3));
    w.busy.add(seg(0));
    freeLater(w, 0);
    const results = await storm(w, ['u1', 'u2', 'u3']);
    expect(results.every((r) => r.status === 'rejected' && r.reason instanceof UnavailableError)).toBe(true);
    expect(
      releasedKeys(w)
        .filter((k) => k.startsWith('lock:order:'))
        .sort(),
    ).toEqual([userLock('u1'), userLock('u2'), userLock('u3')]);
    expect(releasedKeys(w).filter((k) => k.startsWith('lock:stock:'))).toEqual([seg(0)]);
    expect(w.stocks).toEqual([10]);
  });

  it('should settle each order of a batch whose reply was lost on its own, answering each with its own outcome', async () => {
    const w = world({ stocks: [10], config: { locks: { waitMs: 2000 } } });
    w.orders.sellBatch.mockImplementation(
      async (p: number, idx: number, _token: number, entries: Array<{ userId: string; quantity: number }>) => {
        throw new UncertainBatch(
          entries.map(
            (e) => new UncertainWrite(p, e.userId, e.quantity, [idx], 'tag', 0n, new Error('Connection terminated')),
          ),
        );
      },
    );
    // u2's write committed; the others' did not
    w.orders.settle.mockImplementation(async (u: UncertainWrite) => {
      if (u.userId === 'u2')
        return {
          id: 900,
          productId: PRODUCT,
          userId: 'u2',
          quantity: 1,
          allocations: [{ segment: 0, quantity: 1 }],
          status: 'reserved' as const,
          createdAt: new Date(),
          expiresAt: new Date(),
        };
      throw new UnavailableError('postgres', 3);
    });
    w.busy.add(seg(0));
    freeLater(w, 0);
    const results = await storm(w, ['u1', 'u2', 'u3']);
    expect(w.orders.settle.mock.calls.map((c) => c[0].userId).sort()).toEqual(['u1', 'u2', 'u3']);
    expect(results[1]).toEqual({ status: 'fulfilled', value: expect.objectContaining({ userId: 'u2' }) });
    expect(results[0]).toEqual({ status: 'rejected', reason: expect.any(UnavailableError) });
    expect(results[2]).toEqual({ status: 'rejected', reason: expect.any(UnavailableError) });
  });

  it('should sell one order per lock hold with ORDER_BATCH_MAX=1 (the seed design)', async () => {
    const w = world({ stocks: [10], config: { locks: { waitMs: 2000, batchMax: 1 } } });
    w.busy.add(seg(0));
    freeLater(w, 0);
    expect(sold(await storm(w, ['u1', 'u2', 'u3']))).toHaveLength(3);
    expect(w.orders.sellBatch).not.toHaveBeenCalled();
    expect(w.orders.sellFromSegment).toHaveBeenCalledTimes(3);
    expect(w.stocks).toEqual([7]);
  });

  it('should take at most ORDER_BATCH_MAX orders into one hold', async () => {
    const w = world({ stocks: [10], config: { locks: { waitMs: 2000, batchMax: 3 } } });
    w.busy.add(seg(0));
    freeLater(w, 0);
    expect(sold(await storm(w, ['u1', 'u2', 'u3', 'u4', 'u5', 'u6', 'u7']))).toHaveLength(7);
    const sizes = w.orders.sellBatch.mock.calls.map((c) => c[3].length);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(3);
    expect(w.stocks).toEqual([3]);
  });
});

describe('OrdersService.place: fencing tokens', () => {
  const fence = (idx: number) => `fence:{${seg(idx)}}`;
  const refused = (segment: number, token: number, stored: number): Fenced => ({
    kind: 'fenced',
    segment,
    token,
    fence: stored,
  });
  const storm = (w: World, users: string[]) =>
    Promise.all(users.map((userId) => w.service.place({ userId, productId: PRODUCT, quantity: 1 })));

  it("should take each segment lock with the segment's fencing counter and write under it with the token it drew", async () => {
    const w = world({ stocks: [5, 5] });
    startAt(1, 2);
    await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
    const take = w.locks.tryAcquire.mock.calls.findIndex((c) => c[0] === seg(1));
    expect(w.locks.tryAcquire.mock.calls[take][2]).toBe(fence(1));
    const { token } = (await w.locks.tryAcquire.mock.results[take].value) as { token: number };
    expect(w.orders.sellFromSegment.mock.calls[0][2]).toBe(token);
  });

  it('should take a sale refused for a stale token as a busy segment: counter raised to the fence, lock let go, the order sold elsewhere', async () => {
    const w = world({ stocks: [5, 5] });
    startAt(0, 2);
    w.orders.sellFromSegment.mockResolvedValueOnce(refused(0, 3, 9));
    const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
    expect(w.locks.raiseFence).toHaveBeenCalledWith(fence(0), 9);
    expect(w.locks.release.mock.calls.map((c) => (c[0] as { key: string }).key)).toContain(seg(0));
    expect(order.allocations).toEqual([{ segment: 1, quantity: 1 }]);
    expect(w.stocks).toEqual([5, 4]);
  });

  it('should send the riders of a refused batch back to their wait and sell every order in a later hold', async () => {
    const w = world({ stocks: [10], config: { locks: { waitMs: 2000 } } });
    w.busy.add(seg(0));
    setTimeout(() => w.busy.delete(seg(0)), 20);
    w.orders.sellBatch.mockResolvedValueOnce(refused(0, 1, 5));
    const orders = await storm(w, ['u1', 'u2', 'u3']);
    expect(orders.map((o) => o.userId).sort()).toEqual(['u1', 'u2', 'u3']);
    expect(w.locks.raiseFence).toHaveBeenCalledWith(fence(0), 5);
    expect(w.stocks).toEqual([7]);
  });

  it('should look again when a sale spread over segments is refused for a stale token, and sell it under fresh locks', async () => {
    const w = world({ stocks: [1, 2, 0, 2], limitPerUser: 3 });
    startAt(0, 4);
    w.orders.sellFromSegments.mockResolvedValueOnce(refused(1, 2, 7));
    const order = await w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 3 });
    expect(w.locks.raiseFence).toHaveBeenCalledWith(fence(1), 7);
    expect(w.orders.sellFromSegments).toHaveBeenCalledTimes(2);
    const [first, second] = w.orders.sellFromSegments.mock.calls.map((c) => c[2]);
    expect(Math.min(...second)).toBeGreaterThan(Math.max(...first));
    expect(order.quantity).toBe(3);
    expect(w.stocks).toEqual([1, 0, 0, 1]);
  });
});

describe('OrdersService.place: segment holds per process (ORDER_HOLDS_MAX)', () => {
  /** Slows both selling statements down so that holds overlap, and counts the segment locks held at once. */
  function slowStatements(w: World) {
    let held = 0;
    let most = 0;
    const acquire = w.locks.tryAcquire.getMockImplementation() as (key: string) => Promise<unknown>;
    w.locks.tryAcquire.mockImplementation(async (key: string) => {
      const lock = await acquire(key);
      if (lock && key.startsWith('lock:stock:')) most = Math.max(most, ++held);
      return lock;
    });
    w.locks.release.mockImplementation(async (lock: { key: string }) => {
      if (lock.key.startsWith('lock:stock:')) held -= 1;
    });
    for (const name of ['sellFromSegment', 'sellBatch'] as const) {
      const sell = w.orders[name].getMockImplementation() as (...args: unknown[]) => Promise<unknown>;
      (w.orders[name] as jest.Mock).mockImplementation(async (...args: unknown[]) => {
        await new Promise((r) => setTimeout(r, 5));
        return sell(...args);
      });
    }
    return { most: () => most };
  }
  const place = (w: World, users: string[]) =>
    Promise.all(users.map((userId) => w.service.place({ userId, productId: PRODUCT, quantity: 1 })));
  const users = Array.from({ length: 12 }, (_, i) => `u${i}`);

  it('should hold at most ORDER_HOLDS_MAX segments of a product at once and sell the other orders as riders in those holds', async () => {
    const w = world({ stocks: [20, 20, 20, 20, 20, 20], config: { locks: { waitMs: 2000, holdsMax: 2 } } });
    const holds = slowStatements(w);
    const orders = await place(w, users);
    expect(new Set(orders.map((o) => o.userId))).toEqual(new Set(users));
    expect(holds.most()).toBe(2);
    const statements = w.orders.sellBatch.mock.calls.length + w.orders.sellFromSegment.mock.calls.length;
    expect(statements).toBeLessThan(users.length);
    expect(w.stocks.reduce((a, b) => a + b, 0)).toBe(120 - users.length);
  });

  it('should not poll on the retry delay while every segment an order waits for is held by this process, and still sell every order', async () => {
    const w = world({ stocks: [20, 20], config: { locks: { waitMs: 2000, batchMax: 1 } } });
    slowStatements(w);
    const orders = await place(w, users);
    expect(orders).toHaveLength(users.length);
    // past MAX_LOCAL_STREAK hand-offs a segment is left free for a moment, and a waiter is woken for it late
    expect(w.orders.sellFromSegment).toHaveBeenCalledTimes(users.length);
    expect(w.onWait).not.toHaveBeenCalled();
  });

  it('should poll on the retry delay while a segment it waits for is held by another process', async () => {
    const w = world({ stocks: [20, 20], config: { locks: { waitMs: 2000, batchMax: 1 } } });
    slowStatements(w);
    w.busy.add(seg(1));
    setTimeout(() => w.busy.delete(seg(1)), 30);
    expect(await place(w, users)).toHaveLength(users.length);
    expect(w.onWait).toHaveBeenCalled();
  });

  it('should answer UNAVAILABLE to every order queued behind the holds once a segment lock finds Redis lost, not let each meet the timeout in turn', async () => {
    const w = world({ stocks: [20, 20, 20, 20, 20, 20], config: { locks: { waitMs: 2000, holdsMax: 2 } } });
    const acquire = w.locks.tryAcquire.getMockImplementation() as (key: string) => Promise<unknown>;
    // A frozen Redis: every segment lock vote runs into the command timeout.
    w.locks.tryAcquire.mockImplementation(async (key: string) => {
      if (!key.startsWith('lock:stock:')) return acquire(key);
      await new Promise((r) => setTimeout(r, 20));
      throw new UnavailableError('redis', 1, new Error('Command timed out'));
    });
    const outcomes = await Promise.allSettled(
      users.map((userId) => w.service.place({ userId, productId: PRODUCT, quantity: 1 })),
    );
    expect(outcomes.map((o) => (o.status === 'rejected' ? (o.reason as Error).constructor.name : 'sold'))).toEqual(
      users.map(() => 'UnavailableError'),
    );
    // Only the two holders asked Redis for a segment; the ten behind them were answered with their error.
    expect(acquiredKeys(w).filter((k) => k.startsWith('lock:stock:'))).toHaveLength(2);
    expect(w.orders.sellBatch).not.toHaveBeenCalled();
    expect(w.orders.sellFromSegment).not.toHaveBeenCalled();
  });

  it('should let every order take its own hold with ORDER_BATCH_MAX=1, whatever ORDER_HOLDS_MAX says', async () => {
    const w = world({
      stocks: [20, 20, 20, 20, 20, 20],
      config: { locks: { waitMs: 2000, holdsMax: 2, batchMax: 1 } },
    });
    const holds = slowStatements(w);
    await place(w, users);
    expect(holds.most()).toBe(6);
    expect(w.orders.sellFromSegment).toHaveBeenCalledTimes(users.length);
  });
});

describe('OrdersService.place: a segment lock lost during its hold (its extension failed)', () => {
  /**
   * u1 holds segment 0 for a slow sale while u2, of the same process, finds it held here and waits
   * patiently for the release; how long u2 waited, with u1's lock lost during its hold or not.
   */
  async function secondOrderWaits(lockLost: boolean): Promise<{ ms: number; orders: OrderRow[] }> {
    const w = world({ stocks: [5], config: { locks: { waitMs: 2000, batchMax: 1 } } });
    const acquire = w.locks.tryAcquire.getMockImplementation() as (key: string) => Promise<{ key: string } | null>;
    w.locks.tryAcquire.mockImplementation(async (key: string) => {
      const lock = await acquire(key);
      return lock && lockLost && key === seg(0)
        ? { ...lock, lost: { reason: 'not_held', cause: new Error('extension refused') } }
        : lock;
    });
    const sell = w.orders.sellFromSegment.getMockImplementation() as NonNullable<
      ReturnType<typeof w.orders.sellFromSegment.getMockImplementation>
    >;
    w.orders.sellFromSegment.mockImplementation(async (...args) => {
      await new Promise((r) => setTimeout(r, 20));
      return sell(...args);
    });
    // The clock is the spec's (fake timers): how long u2 waited is counted in the service's own
    // timers, which a loaded machine cannot stretch.
    jest.useFakeTimers();
    try {
      const first = w.service.place({ userId: 'u1', productId: PRODUCT, quantity: 1 });
      await jest.advanceTimersByTimeAsync(5);
      const started = Date.now();
      let answeredAt: number | undefined;
      const second = w.service.place({ userId: 'u2', productId: PRODUCT, quantity: 1 }).finally(() => {
        answeredAt = Date.now();
      });
      while (answeredAt === undefined && Date.now() - started < 5_000) await jest.advanceTimersByTimeAsync(1);
      return { ms: (answeredAt ?? Infinity) - started, orders: [await first, await second] };
    } finally {
      jest.useRealTimers();
    }
  }

  it('should still answer with the sale made in the hold', async () => {
    const { orders } = await secondOrderWaits(true);
    expect(orders.map((o) => o.userId)).toEqual(['u1', 'u2']);
  });

  it('should not hand the segment to a waiting order of this process, which then tries again on its own timer', async () => {
    expect((await secondOrderWaits(false)).ms).toBeLessThan(150);
    expect((await secondOrderWaits(true)).ms).toBeGreaterThanOrEqual(150);
  });
});

describe('OrdersService pay and cancel', () => {
  const returned = { productId: PRODUCT, layoutVersion: 3, segments: [1, 4], units: 2 };

  it('should clear the hints of the segments a cancel returned units to, and count the units', async () => {
    const w = world({ stocks: [1] });
    (w.orders as unknown as { cancel: jest.Mock }).cancel = jest.fn(async () => ({
      order: { id: 5, status: 'cancelled' },
      returned,
    }));
    await expect(w.service.cancel('5', 'u1')).resolves.toMatchObject({ status: 'cancelled' });
    expect(w.hints.stockReturned).toHaveBeenCalledWith(PRODUCT, 3, [1, 4]);
    expect(w.metrics.unitsReturned.inc).toHaveBeenCalledWith({ reason: 'cancelled' }, 2);
    expect(w.metrics.orderTransitions.inc).toHaveBeenCalledWith({ to: 'cancelled' });
  });

  it('should answer a cancel that returned nothing (already cancelled) without touching hints or counters', async () => {
    const w = world({ stocks: [1] });
    (w.orders as unknown as { cancel: jest.Mock }).cancel = jest.fn(async () => ({
      order: { id: 5, status: 'cancelled' },
      returned: null,
    }));
    await w.service.cancel('5', 'u1');
    expect(w.hints.stockReturned).not.toHaveBeenCalled();
    expect(w.metrics.orderTransitions.inc).not.toHaveBeenCalled();
  });

  it('should answer the cancel even when the hints cannot be cleared, counting the Redis error', async () => {
    const w = world({ stocks: [1] });
    (w.orders as unknown as { cancel: jest.Mock }).cancel = jest.fn(async () => ({
      order: { id: 5, status: 'cancelled' },
      returned,
    }));
    w.hints.stockReturned.mockRejectedValue(new Error('redis down'));
    await expect(w.service.cancel('5', 'u1')).resolves.toMatchObject({ status: 'cancelled' });
    expect(w.metrics.dependencyErrors.inc).toHaveBeenCalledWith({ dependency: 'redis' });
  });

  it('should count a payment only when this call paid the order', async () => {
    const w = world({ stocks: [1] });
    const payMock = jest.fn();
    (w.orders as unknown as { pay: jest.Mock }).pay = payMock;
    payMock
      .mockResolvedValueOnce({ order: { id: 5, status: 'paid' }, changed: true })
      .mockResolvedValueOnce({ order: { id: 5, status: 'paid' }, changed: false });
    await w.service.pay('5', 'u1');
    await w.service.pay('5', 'u1');
    expect(w.metrics.orderTransitions.inc).toHaveBeenCalledTimes(1);
  });

  it('should answer ORDER_NOT_FOUND for an id that is not a positive integer without asking PostgreSQL', async () => {
    const w = world({ stocks: [1] });
    const payMock = jest.fn();
    (w.orders as unknown as { pay: jest.Mock }).pay = payMock;
    await expect(w.service.pay('0', 'u1')).rejects.toBeInstanceOf(OrderNotFoundError);
    await expect(w.service.pay('12a', 'u1')).rejects.toBeInstanceOf(OrderNotFoundError);
    expect(payMock).not.toHaveBeenCalled();
  });
});
