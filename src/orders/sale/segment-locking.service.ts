// How an order holds a segment: the user lock and hints in one Redis script (the gate), a
// Redlock lock per segment, a board of what this process holds and who here waits, and group
// commit: a holder sells the waiting orders of its process in its own hold and one statement.
// On a Redis Cluster a segment whose lock master cannot be reached is "down": the order falls over
// to the others, and this process passes over that master's segments for DOWN_MEMORY_MS before
// asking again (RedisReachability), so a dead or frozen master costs few calls, not one per order.
import { setTimeout as sleep } from 'node:timers/promises';
import { Injectable, Logger } from '@nestjs/common';
import { LocksConfig } from '../../config/app-config';
import { AlreadyOrderedError, UnavailableError } from '../../common/domain-errors';
import { unreachable } from '../../common/unreachable';
import type { ProductInfo } from '../../inventory/product.types';
import { StockHintsService } from '../../inventory/stock-hints.service';
import { RedisReachability } from '../../infrastructure/redis-reachability';
import { lockKeys } from '../../infrastructure/redis-keys';
import { HeldLock, LockService } from './lock.service';
import { LocalLockBoard, WaitEnd } from './local-lock-board';
import { MetricsService } from '../../metrics/metrics.service';
import { OrderGateService } from './order-gate.service';
import {
  BatchAttempt,
  BatchEntry,
  BatchResult,
  Fenced,
  OrderRow,
  SegmentAttempt,
  UncertainBatch,
} from '../order.types';
import { SaleWritesRepository } from '../repositories/sale-writes.repository';
import { Entry, OrderPass, PlaceOrder, RideAnswer, SegmentTry, Wake } from './sale';

/**
 * The safety timer of a patient wait. Such a wait ends on a local release or a ride; the timer
 * only bounds what a wake-up that went to a request unable to use the segment (it had found that
 * segment too small for its quantity) can cost the others.
 */
const PATIENT_WAIT_MS = 200;

/** A try at a segment's Redis lock: held (sell now), busy, or down (its cluster master is unreachable). */
type SegmentLock = { kind: 'held'; held: HeldLock } | { kind: 'busy' } | { kind: 'down' };

@Injectable()
export class SegmentLockingService {
  private readonly logger = new Logger(SegmentLockingService.name);
  /** Segment locks this process holds, and its requests waiting for one (with their rides). */
  private readonly lockBoard: LocalLockBoard<BatchEntry, RideAnswer>;
  /** Each waiting order's place in line, kept across its waits. */
  private readonly tickets = new WeakMap<PlaceOrder, number>();

  constructor(
    private readonly lockConfig: LocksConfig,
    private readonly gate: OrderGateService,
    private readonly hints: StockHintsService,
    private readonly locks: LockService,
    private readonly reach: RedisReachability,
    private readonly saleWrites: SaleWritesRepository,
    private readonly metrics: MetricsService,
  ) {
    // After a streak of local hand-offs a released segment is left to other processes for one
    // retry delay (their waiters poll that often) before a request of this process is woken for it.
    this.lockBoard = new LocalLockBoard<BatchEntry, RideAnswer>(lockConfig.retryDelayMs);
  }

  enter(product: ProductInfo, req: PlaceOrder): Promise<Entry> {
    return this.gate.enter(product, req.userId);
  }

  leave(pass: OrderPass): Promise<void> {
    return this.gate.leave(pass);
  }

  queueBehind(productId: number): boolean {
    return this.lockBoard.waiting(productId) > 0 || this.atCapacity(productId);
  }

  /**
   * With group commit, ORDER_HOLDS_MAX holds of a product per process: the orders beyond wait and
   * ride in those holds, so a process sells in few large statements rather than in one small one
   * per segment. With ORDER_BATCH_MAX=1 nobody rides, and every order takes its own hold.
   */
  atCapacity(productId: number): boolean {
    return this.lockConfig.batchMax > 1 && this.lockBoard.holds(productId) >= this.lockConfig.holdsMax;
  }

  heldHere(productId: number, idx: number): boolean {
    return this.lockBoard.isHeld(productId, idx);
  }

  wait(productId: number, req: PlaceOrder, patient: boolean): Promise<WaitEnd<RideAnswer>> {
    const ms = patient ? PATIENT_WAIT_MS : this.locks.backoffMs();
    // An order keeps its place in line across its waits (first come, first served as a rider).
    let ticket = this.tickets.get(req);
    if (ticket === undefined) {
      ticket = this.lockBoard.ticket();
      this.tickets.set(req, ticket);
    }
    return this.lockBoard.waitForRelease(
      productId,
      ms,
      { userId: req.userId, quantity: req.quantity, admissionPosition: req.admissionPosition },
      ticket,
    );
  }

  /** Under the segment's Redis lock; a segment found empty is remembered so later orders skip it. */
  async attempt(product: ProductInfo, idx: number, req: PlaceOrder): Promise<SegmentTry> {
    // Held (or being taken) by another request of this very process: busy, no Redis round trip.
    if (this.lockBoard.isHeld(product.id, idx)) return { kind: 'busy' };
    const key = lockKeys.segment(product.id, idx);
    const master = this.reach.masterOf(key);
    if (this.reach.isDown(master)) return { kind: 'down' };
    this.lockBoard.hold(product.id, idx);
    let lock: SegmentLock;
    try {
      lock = await this.lockSegment(product.id, idx, key, master);
    } catch (err) {
      this.lockBoard.abandon(product.id, idx);
      throw err;
    }
    switch (lock.kind) {
      case 'busy':
      case 'down':
        this.lockBoard.abandon(product.id, idx);
        return lock;
      case 'held':
        return this.sellHeld(product, idx, req, lock.held);
      default:
        return unreachable(lock);
    }
  }

  /**
   * One try at the segment's Redis lock. Throws UnavailableError when the lock masters are lost
   * outside a cluster (see below); on a cluster only this master is, and the segment is down.
   */
  private async lockSegment(productId: number, idx: number, key: string, master: string): Promise<SegmentLock> {
    let held: HeldLock | null;
    try {
      held = await this.locks.tryAcquire(key, this.lockConfig.ttlMs, lockKeys.segmentFence(productId, idx));
    } catch (err) {
      if (!(err instanceof UnavailableError)) throw err;
      this.metrics.lockAttempts.inc({ master, outcome: 'unreachable' });
      if (this.reach.sharded) {
        this.reach.markDown(master, err);
        return { kind: 'down' };
      }
      // Outside a cluster every segment has the same lock masters, and they are lost: the orders
      // of this process queued for the product would otherwise meet the same timeout one after
      // another, each when a hold frees up (a frozen Redis kept some waiting for seconds).
      for (const rider of this.lockBoard.takeRiders(productId, Number.MAX_SAFE_INTEGER))
        rider.serve({ kind: 'failed', error: err });
      throw err;
    }
    this.reach.markUp(master);
    this.metrics.lockAttempts.inc({ master, outcome: held ? 'acquired' : 'busy' });
    if (!held) {
      this.metrics.lockBusy.inc();
      return { kind: 'busy' };
    }
    return { kind: 'held', held };
  }

  /**
   * Sells in a hold of the segment's lock, then lets the lock go. A hold whose lock was lost on
   * the way (its extension failed: see LockService) still answers with its sale: the conditional
   * UPDATE decided it in PostgreSQL, and the lock only kept other orders off the row meanwhile.
   * What the loss changes is the hand-off: the segment's lock may be another process's by now, so
   * it is not handed to a waiter here (who would only find it busy in Redis); waiters here keep
   * their own timers. A sale PostgreSQL refused for a stale fencing token proves the loss: the
   * segment is busy (another holder wrote it), and this hold is abandoned the same way.
   */
  private async sellHeld(product: ProductInfo, idx: number, req: PlaceOrder, held: HeldLock): Promise<SegmentTry> {
    let fenced = false;
    try {
      const outcome = await this.sellInHold(product, idx, req, held);
      if (outcome.kind === 'fenced') {
        fenced = true;
        await this.staleHold(product.id, outcome);
        return { kind: 'busy' };
      }
      if (outcome.remaining === null || outcome.remaining === 0) this.rememberEmpty(product, idx);
      return outcome;
    } finally {
      // Sent now, its reply not awaited: on each master's connection the release is queued ahead
      // of any acquire that a woken local waiter sends next, and the order needs nothing from it.
      void this.locks.release(held);
      if (held.lost || fenced) this.lockBoard.abandon(product.id, idx);
      else this.lockBoard.release(product.id, idx);
    }
  }

  /**
   * A write of this process refused by PostgreSQL for its stale fencing token: said in the log
   * (the nemesis counts these lines across processes, killed ones included), and the segment's
   * token counter raised to the fence, in case it is the counter that fell behind.
   */
  private async staleHold(productId: number, fenced: Fenced): Promise<void> {
    this.logger.warn(
      `stale write refused: segment ${fenced.segment} of product ${productId}, token ${fenced.token} below fence ${fenced.fence}`,
    );
    await this.locks.raiseFence(lockKeys.segmentFence(productId, fenced.segment), fenced.fence);
  }

  /**
   * Locks in ascending index order (no deadlock between two spreading orders), then one
   * transaction. Null when nothing sold: the segments no longer hold q, or a lock was lost (a
   * stale token) and the order looks again.
   */
  async sellSpread(product: ProductInfo, picked: number[], req: PlaceOrder): Promise<OrderRow | null> {
    const held: HeldLock[] = [];
    try {
      for (const idx of picked) {
        held.push(
          await this.locks.acquireWithin(
            lockKeys.segment(product.id, idx),
            this.lockConfig.ttlMs,
            this.lockConfig.waitMs,
            lockKeys.segmentFence(product.id, idx),
          ),
        );
      }
      if (this.lockConfig.holdMs > 0) await sleep(this.lockConfig.holdMs);
      const sale = await this.saleWrites.sellFromSegments(
        product.id,
        picked,
        held.map(tokenOf),
        req.quantity,
        req.userId,
        req.admissionPosition,
      );
      if (sale === null || !('kind' in sale)) return sale;
      await this.staleHold(product.id, sale);
      return null;
    } finally {
      await Promise.all(held.map((h) => this.locks.release(h)));
    }
  }

  async soldOut(productId: number, pass: OrderPass): Promise<void> {
    if (pass.generation === null) return;
    await this.hints
      .markSoldOut(productId, pass.generation)
      .catch(() => this.metrics.dependencyErrors.inc({ dependency: 'redis' }));
  }

  /**
   * Every segment this order could try is held by this process, or it holds all it may: only a
   * local release or a holder taking this order as a rider can help, and both wake it at once, so
   * it need not poll on the retry delay.
   */
  waitsPatiently(productId: number, busy: ReadonlySet<number>): boolean {
    return this.atCapacity(productId) || [...busy].every((i) => this.heldHere(productId, i));
  }

  /** After a wake-up that served nothing: one attempt at a busy segment that this process does not hold. */
  async tryOneBusy(
    product: ProductInfo,
    req: PlaceOrder,
    busy: ReadonlySet<number>,
    end: WaitEnd<RideAnswer>,
    rotation: { turn: number },
  ): Promise<Wake> {
    // At capacity: a holder here will take this order as a rider, or a release wake it.
    if (this.atCapacity(product.id)) return { kind: 'again' };
    const free = [...busy].filter((i) => !this.heldHere(product.id, i));
    if (free.length === 0) return { kind: 'again' };
    // The segment just released here if it is one of ours, else the busy ones in turn.
    const released = end.kind === 'released' ? end.segment : null;
    const idx = released !== null && free.includes(released) ? released : free[rotation.turn++ % free.length];
    const tried = await this.attempt(product, idx, req);
    switch (tried.kind) {
      case 'sold':
        return { kind: 'sold', order: tried.order };
      case 'short':
        return { kind: 'empty', segment: idx };
      case 'busy':
        return { kind: 'again' };
      case 'down':
        return { kind: 'unreachable', segment: idx };
      default:
        return unreachable(tried);
    }
  }

  /**
   * Inside a held segment lock: this order alone (one statement, as with ORDER_BATCH_MAX=1), or
   * with up to ORDER_BATCH_MAX - 1 orders of this process that wait for the product (group
   * commit): one statement for all, each answered on its own. ORDER_HOLD_MS is spent once per
   * hold, after a sale and before any answer; an empty segment is let go at once.
   */
  private async sellInHold(
    product: ProductInfo,
    idx: number,
    req: PlaceOrder,
    held: HeldLock,
  ): Promise<SegmentAttempt | Fenced> {
    const riders = this.lockBoard.takeRiders(product.id, this.lockConfig.batchMax - 1);
    if (riders.length === 0) {
      const outcome = await this.saleWrites.sellFromSegment(
        product.id,
        idx,
        tokenOf(held),
        req.quantity,
        req.userId,
        req.admissionPosition,
      );
      if (this.lockConfig.holdMs > 0 && outcome.kind === 'sold') await sleep(this.lockConfig.holdMs);
      return outcome;
    }
    let batch: BatchAttempt | Fenced;
    try {
      batch = await this.saleWrites.sellBatch(product.id, idx, tokenOf(held), [req, ...riders.map((r) => r.ride)]);
    } catch (err) {
      // A lost reply: every order of the batch settles its own outcome, in its own request.
      const failure = (entry: number): unknown => (err instanceof UncertainBatch ? err.writes[entry] : err);
      riders.forEach((r, i) => r.serve({ kind: 'failed', error: failure(i + 1) }));
      throw failure(0);
    }
    if (batch.kind === 'fenced') {
      // Nothing was written: each rider goes back to its wait and tries again.
      riders.forEach((r) => r.serve({ kind: 'fenced' }));
      return batch;
    }
    try {
      this.metrics.batchSize.observe(riders.length + 1);
      if (this.lockConfig.holdMs > 0 && batch.results.some((r) => r.kind === 'sold'))
        await sleep(this.lockConfig.holdMs);
    } finally {
      // Every rider is answered exactly once, with its own entry's result.
      riders.forEach((r, i) => r.serve(rideAnswer(batch.results[i + 1], idx, batch.remaining)));
    }
    return ownAttempt(batch.results[0], batch.remaining);
  }

  private rememberEmpty(product: ProductInfo, idx: number): void {
    this.hints
      .markEmpty(product.id, product.layoutVersion, idx)
      .catch(() => this.metrics.dependencyErrors.inc({ dependency: 'redis' }));
  }
}

/** A segment lock's fencing token; every segment lock is taken with its fencing counter. */
function tokenOf(held: HeldLock): number {
  if (held.token === null) throw new Error(`segment lock ${held.key} was taken without its fencing token`);
  return held.token;
}

/** A rider's entry of the batch, as the answer that ends its wait. */
function rideAnswer(result: BatchResult, segment: number, remaining: number | null): RideAnswer {
  switch (result.kind) {
    case 'sold':
      return { kind: 'sold', order: result.order };
    case 'alreadyOrdered':
      return { kind: 'alreadyOrdered' };
    case 'short':
      return { kind: 'short', segment, remaining };
    default:
      return unreachable(result);
  }
}

/** The holder's own entry of the batch, as the try at the segment it made. */
function ownAttempt(result: BatchResult, remaining: number | null): SegmentAttempt {
  switch (result.kind) {
    case 'sold':
      return { kind: 'sold', order: result.order, remaining };
    case 'alreadyOrdered':
      throw new AlreadyOrderedError();
    case 'short':
      return { kind: 'short', remaining };
    default:
      return unreachable(result);
  }
}
