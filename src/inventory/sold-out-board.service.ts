// What this process knows of its sold-out products, so that the crowd's "no" costs no PostgreSQL
// statement and no Redis round trip: for each product it learnt was sold out, the users who hold
// its live orders (409 ALREADY_ORDERED keeps its orderId) and a fingerprint of its segment rows.
//
// Why no invalidation message: a message can be lost (a Redis restart, a dropped subscriber, a
// failover), and then a process would refuse returned units for ever. Instead each entry is only
// believed until `freshUntil`, and a poll moves that forward only when PostgreSQL shows the
// segment rows unchanged since the snapshot. Every sale, return, restock and rebalance writes a
// segment row (a new xmin), so units that come back end the entry at the next poll, and if the
// polls fail the entry simply goes stale: refusals then take the ordinary path. Either way no
// process refuses returned units for longer than SOLD_OUT_STALE_MS after they were committed.
// The process that returns units drops its own entry at once (forget).
//
// The poll is one statement every SOLD_OUT_STALE_MS / 4 for all of this process's sold-out
// products, whatever the number of refusals: its cost is per process, not per refusal. It also
// brings the products' terms (sale window, limit), which keeps their catalog entries fresh.
import { Injectable, Logger, OnApplicationShutdown } from '@nestjs/common';
import { DoorConfig } from '../config/app-config';
import { MetricsService } from '../metrics/metrics.service';
import { ProductCatalogService } from './product-catalog.service';
import { StockRepository } from './stock.repository';

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
  /** Epoch ms until which a refusal may be answered from this entry. */
  freshUntil: number;
}

export type Refusal = { kind: 'sold_out' } | { kind: 'already_ordered'; orderId: number };

const SOLD_OUT: Refusal = { kind: 'sold_out' };

@Injectable()
export class SoldOutBoardService implements OnApplicationShutdown {
  private readonly logger = new Logger('SoldOutBoardService');
  private readonly entries = new Map<number, Entry>();
  /** productId -> when this process last returned units of it (the waiting room's admitter asks). */
  private readonly returns = new Map<number, number>();
  /** Learning in flight, one per product. */
  private readonly learning = new Map<number, Promise<void>>();
  /** A product found with units left is not looked at again before this (epoch ms). */
  private readonly quietUntil = new Map<number, number>();
  private timer: NodeJS.Timeout | null = null;
  /** The poll on its way, if any. */
  private polling: Promise<void> | null = null;

  constructor(
    private readonly stock: StockRepository,
    private readonly catalog: ProductCatalogService,
    private readonly door: DoorConfig,
    private readonly metrics: MetricsService,
  ) {}

  /** The answer this process may give from memory, or null: ask the order path. */
  refusal(productId: number, userId: string): Refusal | null {
    const e = this.entries.get(productId);
    if (e === undefined || Date.now() >= e.freshUntil) return null;
    const orderId = e.holders.get(userId);
    return orderId === undefined ? SOLD_OUT : { kind: 'already_ordered', orderId };
  }

  /** Whether the product is on the board at all (fresh or lapsed). */
  holds(productId: number): boolean {
    return this.entries.has(productId);
  }

  /**
   * The poll on its way when the product's entry has lapsed (a busy process handles the poll's
   * answer late): waiting for it costs the caller a few milliseconds, the order path would cost
   * PostgreSQL and Redis calls. Null when there is nothing to wait for.
   */
  renewal(productId: number): Promise<void> | null {
    return this.entries.has(productId) ? this.polling : null;
  }

  /** Whether refusals of this product are answered from memory now. */
  knowsSoldOut(productId: number): boolean {
    const e = this.entries.get(productId);
    return e !== undefined && Date.now() < e.freshUntil;
  }

  /**
   * The order path answered SOLD_OUT: check it in PostgreSQL and, if nothing remains, remember the
   * product with its holders. Never throws; at most one read per product at a time.
   */
  learn(productId: number): void {
    if (this.knowsSoldOut(productId) || this.learning.has(productId)) return;
    if ((this.quietUntil.get(productId) ?? 0) > Date.now()) return;
    const started = Date.now();
    const read = this.stock
      .soldOutSnapshot(productId)
      .then((snap) => {
        if (snap === null || snap.remaining > 0 || snap.holders === null) {
          this.quietUntil.set(productId, Date.now() + 2 * this.pollMs);
          return;
        }
        this.quietUntil.delete(productId);
        if (snap.holders.length > BOARD_MAX_HOLDERS) {
          this.logger.warn(
            `product ${productId} has ${snap.holders.length} live orders, more than the board holds (${BOARD_MAX_HOLDERS}): its refusals take the order path`,
          );
          this.quietUntil.set(productId, Date.now() + 60_000);
          return;
        }
        this.entries.delete(productId);
        // The oldest learnt go first, until the new one fits both bounds.
        while (
          this.entries.size >= BOARD_MAX_PRODUCTS ||
          this.heldHolders() + snap.holders.length > BOARD_MAX_HOLDERS
        ) {
          const oldest = this.entries.keys().next().value;
          if (oldest === undefined) break;
          this.entries.delete(oldest);
        }
        this.entries.set(productId, {
          holders: new Map(snap.holders),
          fingerprint: snap.fingerprint,
          freshUntil: started + this.door.soldOutStaleMs,
        });
        this.metrics.soldOutBoardProducts.set(this.entries.size);
        this.schedule();
      })
      .catch((err: Error) => this.logger.debug(`could not learn product ${productId}: ${err.message}`))
      .finally(() => this.learning.delete(productId));
    this.learning.set(productId, read);
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
    await Promise.all(this.learning.values());
  }

  onApplicationShutdown(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /**
   * A quarter of the bound: an entry lapses only when a poll takes longer than three quarters of
   * SOLD_OUT_STALE_MS (then refusals take the order path until the next poll confirms it).
   */
  private get pollMs(): number {
    return Math.max(5, Math.floor(this.door.soldOutStaleMs / 4));
  }

  /** Polls while any product is held, the next one a poll interval after the last one started. */
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

  /** Confirms or ends every entry from one statement; a failed poll confirms nothing. */
  poll(): Promise<void> {
    if (this.entries.size === 0) return Promise.resolve();
    this.polling ??= this.confirm().finally(() => (this.polling = null));
    return this.polling;
  }

  private async confirm(): Promise<void> {
    const started = Date.now();
    try {
      const now = await this.stock.fingerprints([...this.entries.keys()]);
      for (const [productId, e] of this.entries) {
        const seen = now.get(productId);
        if (seen !== undefined && seen.remaining === 0 && seen.fingerprint === e.fingerprint) {
          e.freshUntil = started + this.door.soldOutStaleMs;
          // The door checks the sale window and limit from the catalog: keep it fresh here, so that
          // no refusal has to ask PostgreSQL for them.
          this.catalog.remember(seen.terms);
        } else {
          // Something was sold or returned: the order path decides again, and relearns if need be.
          this.entries.delete(productId);
        }
      }
      this.metrics.soldOutBoardProducts.set(this.entries.size);
    } catch (err) {
      this.logger.debug(`poll failed: ${(err as Error).message}`);
    }
  }
}
