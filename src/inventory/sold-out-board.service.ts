// What this process knows of its sold-out products, so that the crowd's "no" costs no PostgreSQL
// statement and no Redis round trip: for each product it learnt was sold out, the users who hold
// its live orders (409 ALREADY_ORDERED keeps its orderId) and a fingerprint of its segment rows.
//
// Why no invalidation message: a message can be lost (a Redis restart, a dropped subscriber, a
// failover), and then a process would refuse returned units for ever. Instead an entry is
// confirmed by polls that find the segment rows unchanged. Every sale, return, restock and
// rebalance writes a segment row (a new xmin), so units that come back end the entry at the next
// poll. The process that returns units drops its own entry at once (forget).
//
// Freshness is judged by when a confirming poll was sent, not by whether this process is on time:
// - while the last confirmation was sent less than SOLD_OUT_STALE_MS ago, a refusal is answered at
//   once (refusal);
// - after that, the refusal waits for a poll sent after the request came in (confirmed): if that
//   poll finds the rows unchanged, the product was sold out at a moment between the request and
//   its answer, however late a lagging event loop handles the reply; if it finds them changed, the
//   order path decides; if it fails or does not answer in time, the service cannot be sure and says
//   so (503). Every request waiting then shares one poll: its cost is per process, not per refusal.
// So no process refuses returned units for longer than SOLD_OUT_STALE_MS after they were committed,
// and no refusal of a product on the board reads PostgreSQL on its own, whatever the loop's lag.
//
// The periodic poll is one statement every SOLD_OUT_STALE_MS / 4 for all of this process's
// sold-out products. It also brings the products' terms (sale window, limit), which keeps their
// catalog entries fresh.
import { Injectable, Logger, OnApplicationShutdown } from '@nestjs/common';
import { DoorConfig } from '../config/app-config';
import { MetricsService } from '../metrics/metrics.service';
import { ProductCatalogService } from './product-catalog.service';
import { PolledProduct, SoldOutSnapshot, StockRepository } from './stock.repository';

/** At most this many sold-out products are held per process (the oldest learnt is dropped first). */
export const BOARD_MAX_PRODUCTS = 256;
/**
 * At most this many holders over all of them: about 16 MB of heap per 100,000 (measured by
 * `npm run bench:door`), so some 40 MB beside the 128 MB heap bound of `npm start`. A product with
 * more holders than this alone is not held: its refusals take the order path, as before the board.
 */
export const BOARD_MAX_HOLDERS = 250_000;

/** Products whose last return is remembered; past this the record starts again (a return then only waits for a quiet room's next read). */
const RETURNS_MAX = 10_000;

interface Entry {
  /** userId -> id of the live order it holds. */
  holders: Map<string, number>;
  fingerprint: string;
  /** Epoch ms at which the read that last confirmed the entry was sent. */
  confirmedAt: number;
}

export type Refusal = { kind: 'sold_out' } | { kind: 'already_ordered'; orderId: number };

/**
 * What a poll sent after the request says of its product: a refusal, `changed` (the order path
 * decides) or `unsure` (the poll failed or did not answer within POLL_TIMEOUT_MS).
 */
export type Confirmation = Refusal | { kind: 'changed' } | { kind: 'unsure' };

/**
 * What the board tells an order that found nothing left: a refusal; the layout a read found with
 * units left (a stale sold-out flag); nothing left but too many holders to tell this buyer's; or
 * the read's failure.
 */
export type BoardAnswer =
  | Refusal
  | { kind: 'units_left'; remaining: number; layoutVersion: number; withStock: number[] }
  | { kind: 'nothing_left' }
  | { kind: 'failed'; error: Error };

/** What one read of a product saw: its snapshot (null: no segments), or the error it failed with. */
type Seen = SoldOutSnapshot | null | Error;

const SOLD_OUT: Refusal = { kind: 'sold_out' };
const NOTHING_LEFT: BoardAnswer = { kind: 'nothing_left' };
const CHANGED: Confirmation = { kind: 'changed' };
const UNSURE: Confirmation = { kind: 'unsure' };

/** A poll that has not answered within this long fails for the requests waiting on it (they are told 503). */
export const POLL_TIMEOUT_MS = 1000;

@Injectable()
export class SoldOutBoardService implements OnApplicationShutdown {
  private readonly logger = new Logger('SoldOutBoardService');
  private readonly entries = new Map<number, Entry>();
  /** productId -> when this process last returned units of it (the waiting room's admitter asks). */
  private readonly returns = new Map<number, number>();
  /** Reads of a product in flight (one per product), with when each was sent. */
  private readonly learning = new Map<number, { sentAt: number; done: Promise<Seen> }>();
  /** The read that starts when a product's read on its way has answered, for orders that came after it was sent. */
  private readonly learnQueued = new Map<number, Promise<Seen>>();
  /** A product found with units left is not looked at again before this (epoch ms). */
  private readonly quietUntil = new Map<number, number>();
  private timer: NodeJS.Timeout | null = null;
  /** The poll on its way, with when it was sent; it resolves to whether it answered. */
  private inFlight: { sentAt: number; done: Promise<boolean> } | null = null;
  /** The poll that starts when the one on its way has answered, for requests that came after it was sent. */
  private queued: Promise<boolean> | null = null;

  constructor(
    private readonly stock: StockRepository,
    private readonly catalog: ProductCatalogService,
    private readonly door: DoorConfig,
    private readonly metrics: MetricsService,
  ) {}

  /** The answer this process may give from memory at once, or null: ask `confirmed` (held) or the order path. */
  refusal(productId: number, userId: string): Refusal | null {
    const e = this.entries.get(productId);
    if (e === undefined || Date.now() >= e.confirmedAt + this.door.soldOutStaleMs) return null;
    return refusalOf(e, userId);
  }

  /** Whether the product is on the board at all (fresh or lapsed). */
  holds(productId: number): boolean {
    return this.entries.has(productId);
  }

  /**
   * For a product on the board whose last confirmation is older than the bound: what a poll sent
   * from now on says. One poll serves every request waiting at the time.
   */
  async confirmed(productId: number, userId: string): Promise<Confirmation> {
    const asked = Date.now();
    if (!(await this.pollSentAfter(asked))) return UNSURE;
    const e = this.entries.get(productId);
    // Gone: something was sold or returned. Learnt again by a read sent before the request: too old.
    if (e === undefined || e.confirmedAt < asked) return CHANGED;
    return refusalOf(e, userId);
  }

  /** Whether refusals of this product are answered from memory now. */
  knowsSoldOut(productId: number): boolean {
    const e = this.entries.get(productId);
    return e !== undefined && Date.now() < e.confirmedAt + this.door.soldOutStaleMs;
  }

  /**
   * The order path answered SOLD_OUT: check it in PostgreSQL and, if nothing remains, remember the
   * product with its holders. Never throws; at most one read per product at a time.
   */
  learn(productId: number): void {
    if (this.knowsSoldOut(productId) || this.learning.has(productId)) return;
    if ((this.quietUntil.get(productId) ?? 0) > Date.now()) return;
    void this.read(productId);
  }

  /**
   * The order path found nothing left for this buyer (a request that began at `asked`): what a read
   * sent after that saw, which every order of the product waiting then shares (so the crowd that
   * arrives as a product sells out costs one read per process, not one each). A refusal from the
   * entry it made; `units_left` with the layout it read (the Redis sold-out flag was stale);
   * `nothing_left` when the product has more holders than the board holds; `failed` with the error.
   */
  async soldOutFor(productId: number, userId: string, asked: number): Promise<BoardAnswer> {
    const known = this.entries.get(productId);
    if (known !== undefined && known.confirmedAt >= asked) return refusalOf(known, userId);
    const seen = await this.readSentAfter(productId, asked);
    if (seen instanceof Error) return { kind: 'failed', error: seen };
    if (seen === null) return NOTHING_LEFT;
    if (seen.remaining > 0)
      return {
        kind: 'units_left',
        remaining: seen.remaining,
        layoutVersion: seen.layoutVersion,
        withStock: seen.withStock,
      };
    const e = this.entries.get(productId);
    return e !== undefined && e.confirmedAt >= asked ? refusalOf(e, userId) : NOTHING_LEFT;
  }

  /** A read of the product sent at `asked` or later: the one on its way if it was, else the next one. */
  private readSentAfter(productId: number, asked: number): Promise<Seen> {
    const inFlight = this.learning.get(productId);
    if (inFlight === undefined) return this.read(productId);
    if (inFlight.sentAt >= asked) return inFlight.done;
    let next = this.learnQueued.get(productId);
    if (next === undefined) {
      next = inFlight.done.then(() => {
        this.learnQueued.delete(productId);
        return this.learning.get(productId)?.done ?? this.read(productId);
      });
      this.learnQueued.set(productId, next);
    }
    return next;
  }

  /** One read of the product's stock and holders; an entry when nothing remains. Never rejects: a failure is its answer. */
  private read(productId: number): Promise<Seen> {
    const sentAt = Date.now();
    const done: Promise<Seen> = this.stock
      .soldOutSnapshot(productId)
      .then((snap) => this.remember(productId, snap, sentAt))
      .catch((err: Error) => {
        this.logger.debug(`could not learn product ${productId}: ${err.message}`);
        return err;
      })
      .finally(() => {
        if (this.learning.get(productId)?.done === done) this.learning.delete(productId);
      });
    this.learning.set(productId, { sentAt, done });
    return done;
  }

  /** What a read saw, kept as an entry when nothing remains and the holders fit. */
  private remember(productId: number, snap: SoldOutSnapshot | null, sentAt: number): SoldOutSnapshot | null {
    if (snap === null || snap.remaining > 0 || snap.holders === null) {
      this.quietUntil.set(productId, Date.now() + 2 * this.pollMs);
      return snap;
    }
    this.quietUntil.delete(productId);
    if (snap.holders.length > BOARD_MAX_HOLDERS) {
      this.logger.warn(
        `product ${productId} has ${snap.holders.length} live orders, more than the board holds (${BOARD_MAX_HOLDERS}): its refusals take the order path`,
      );
      this.quietUntil.set(productId, Date.now() + 60_000);
      return snap;
    }
    this.entries.delete(productId);
    // The oldest learnt go first, until the new one fits both bounds.
    while (this.entries.size >= BOARD_MAX_PRODUCTS || this.heldHolders() + snap.holders.length > BOARD_MAX_HOLDERS) {
      const oldest = this.entries.keys().next().value;
      if (oldest === undefined) break;
      this.entries.delete(oldest);
    }
    this.entries.set(productId, { holders: new Map(snap.holders), fingerprint: snap.fingerprint, confirmedAt: sentAt });
    this.metrics.soldOutBoardProducts.set(this.entries.size);
    this.schedule();
    return snap;
  }

  private heldHolders(): number {
    let n = 0;
    for (const e of this.entries.values()) n += e.holders.size;
    return n;
  }

  /** Units of the product came back here: stop refusing it at once. */
  forget(productId: number): void {
    this.entries.delete(productId);
    this.quietUntil.delete(productId);
    this.metrics.soldOutBoardProducts.set(this.entries.size);
    if (this.returns.size >= RETURNS_MAX) this.returns.clear();
    this.returns.set(productId, Date.now());
  }

  /** When this process last returned units of the product (epoch ms; 0: not since it started, or forgotten). */
  returnedAt(productId: number): number {
    return this.returns.get(productId) ?? 0;
  }

  /** Resolves once every learn in flight has finished (tests). */
  async settled(): Promise<void> {
    await Promise.all([...this.learning.values()].map((l) => l.done));
  }

  onApplicationShutdown(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /**
   * A quarter of the bound: while the event loop is on time an entry never lapses, and no request
   * waits for a poll.
   */
  private get pollMs(): number {
    return Math.max(5, Math.floor(this.door.soldOutStaleMs / 4));
  }

  /** Polls while any product is held, the next one a poll interval after the last one was sent. */
  private schedule(delayMs = this.pollMs): void {
    if (this.timer !== null) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      const started = Date.now();
      void this.poll().finally(() => {
        if (this.entries.size > 0) this.schedule(Math.max(0, started + this.pollMs - Date.now()));
      });
    }, delayMs);
    this.timer.unref();
  }

  /** Confirms or ends every entry from one statement (the one on its way, if any); resolves to whether it answered. */
  poll(): Promise<boolean> {
    if (this.entries.size === 0) return Promise.resolve(true);
    return this.inFlight?.done ?? this.send();
  }

  /** A poll sent at `t` or later: the one on its way if it was, else the next one, sent once it has answered. */
  private pollSentAfter(t: number): Promise<boolean> {
    if (this.inFlight === null) return this.send();
    if (this.inFlight.sentAt >= t) return this.inFlight.done;
    this.queued ??= this.inFlight.done.then(() => {
      this.queued = null;
      // Whatever is on its way now was sent after the one every waiter here came after.
      return this.inFlight?.done ?? this.send();
    });
    return this.queued;
  }

  private send(): Promise<boolean> {
    const sentAt = Date.now();
    const done = this.confirm(sentAt).finally(() => {
      if (this.inFlight?.done === done) this.inFlight = null;
    });
    this.inFlight = { sentAt, done };
    return done;
  }

  private async confirm(sentAt: number): Promise<boolean> {
    const asked = [...this.entries.keys()];
    let now: Map<number, PolledProduct>;
    try {
      const answer = await withinPollTimeout(this.stock.fingerprints(asked));
      if (answer === null) {
        this.logger.debug(`poll not answered within ${POLL_TIMEOUT_MS} ms`);
        return false;
      }
      now = answer;
    } catch (err) {
      this.logger.debug(`poll failed: ${(err as Error).message}`);
      return false;
    }
    for (const productId of asked) {
      const e = this.entries.get(productId);
      // Learnt again since the poll was sent: that read is newer than this one.
      if (e === undefined || e.confirmedAt > sentAt) continue;
      const seen = now.get(productId);
      if (seen !== undefined && seen.remaining === 0 && seen.fingerprint === e.fingerprint) {
        e.confirmedAt = sentAt;
        // The door checks the sale window and limit from the catalog: keep it fresh here, so that
        // no refusal has to ask PostgreSQL for them.
        this.catalog.remember(seen.terms);
      } else {
        // Something was sold or returned: the order path decides again, and relearns if need be.
        this.entries.delete(productId);
      }
    }
    this.metrics.soldOutBoardProducts.set(this.entries.size);
    return true;
  }
}

function refusalOf(e: Entry, userId: string): Refusal {
  const orderId = e.holders.get(userId);
  return orderId === undefined ? SOLD_OUT : { kind: 'already_ordered', orderId };
}

/**
 * The poll's answer, or null when it has not come within POLL_TIMEOUT_MS. The verdict waits for
 * one more turn of the event loop (setImmediate runs after I/O callbacks): a process that was
 * stopped or stalled past the bound finds both the reply and the timer due at once, and the reply
 * wins.
 */
function withinPollTimeout<T>(read: Promise<T>): Promise<T | null> {
  return new Promise<T | null>((resolve, reject) => {
    const timer = setTimeout(() => setImmediate(() => resolve(null)), POLL_TIMEOUT_MS);
    read.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err instanceof Error ? err : new Error(String(err)));
      },
    );
  });
}
