// Settling a write whose reply was lost: a sale (UncertainWrite) or a pay or cancel
// (UncertainChange) that reached PostgreSQL and may have committed. Once pg_stat_activity shows no
// statement of the attempt's tag still running, what the write left in the orders table is the
// truth, and the answer is made from it. See docs/design.md, "Settling a lost commit".
import { setTimeout as sleep } from 'node:timers/promises';
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { DatabaseConfig, HttpConfig } from '../../config/app-config';
import {
  AlreadyOrderedError,
  DomainError,
  OrderNotFoundError,
  OutcomeUnknownError,
  UnavailableError,
} from '../../common/domain-errors';
import { MetricsService } from '../../metrics/metrics.service';
import { OrderRow, UncertainWrite } from '../order.types';
import { LIVE, ORDER_COLUMNS, OrderRecord, tagged, toOrderRow } from './order-sql';

/** A pay or cancel whose write lost its reply: what settleChange() needs to find out. */
export class UncertainChange extends Error {
  constructor(
    readonly tag: string,
    override readonly cause: unknown,
  ) {
    super('the outcome of an order change is unknown');
  }
}

const TRANSITION_UNKNOWN =
  'the database failed while the order was being changed; whether the change took effect is unknown: retry the same call to learn it';

/** Milliseconds since the uncertain write was sent, by this process's monotonic clock. */
const sinceSentMs = (w: UncertainWrite) => Number(process.hrtime.bigint() - w.sentAt) / 1e6;

/** Pause between lookups while PostgreSQL is coming back. */
const SETTLE_RETRY_MS = 100;

@Injectable()
export class OutcomesRepository {
  constructor(
    private readonly db: DataSource,
    private readonly database: DatabaseConfig,
    private readonly http: HttpConfig,
    private readonly metrics: MetricsService,
  ) {}

  /**
   * Learns what became of an uncertain write, within DB_TIMEOUT_MS, retrying while PostgreSQL
   * comes back:
   * - no statement of the attempt still runs (pg_stat_activity) and the user has no order: it did
   *   not commit, and never will: UNAVAILABLE (nothing happened);
   * - the user has an order created since the write was sent: that is this write's order (a 201),
   *   also when it has ended since (its reservation expired while the outcome was unknown);
   * - the user has an older order: it predates this request, which therefore changed nothing:
   *   ALREADY_ORDERED with that order's id;
   * - PostgreSQL did not answer in time, or the attempt still runs: OUTCOME_UNKNOWN.
   * "Since the write was sent" is judged without comparing clocks: the order's age by
   * PostgreSQL's clock against the time since sending by this process's monotonic clock. Only an
   * order of the same user committed within milliseconds before this write could be mistaken for
   * it; the user lock makes that impossible while it is held, and either way the order is real.
   */
  settle(w: UncertainWrite): Promise<OrderRow> {
    const read = async () => {
      const age = `(extract(epoch FROM clock_timestamp() - created_at) * 1000)::float8 AS age_ms`;
      const [live] = await this.db.query<OrderRecord[]>(
        `SELECT ${ORDER_COLUMNS}, ${age} FROM orders WHERE product_id = $1 AND user_id = $2 AND ${LIVE}`,
        [w.productId, w.userId],
      );
      if (live) return live;
      // The write's order may have ended already: a reservation whose reply was lost can expire
      // (or be cancelled) before the outcome is read. Only orders made since the write was sent
      // are looked at (no index serves this read; it runs only after a lost reply).
      const [ended] = await this.db.query<OrderRecord[]>(
        `SELECT ${ORDER_COLUMNS}, ${age} FROM orders
          WHERE product_id = $1 AND user_id = $2 AND NOT (${LIVE})
            AND created_at >= clock_timestamp() - $3 * interval '1 millisecond'
          ORDER BY created_at DESC LIMIT 1`,
        [w.productId, w.userId, sinceSentMs(w) + 5],
      );
      return ended;
    };
    return this.untilKnown(w.tag, w.cause, read, (found) => {
      if (!found) throw new UnavailableError('postgres', this.http.retryAfterS, w.cause);
      const mine =
        (found.age_ms ?? Infinity) <= sinceSentMs(w) + 5 &&
        found.quantity === w.quantity &&
        found.allocations.every((a) => w.segments.includes(a.segment));
      if (mine) return toOrderRow(found);
      if (found.status === 'reserved' || found.status === 'paid') throw new AlreadyOrderedError(Number(found.id));
      // An ended order older than this write: the write made nothing.
      throw new UnavailableError('postgres', this.http.retryAfterS, w.cause);
    });
  }

  /**
   * A pay or cancel whose reply was lost: within DB_TIMEOUT_MS, once no statement of the attempt
   * runs any more, the order's state is the truth. `decide` answers the order (the change took
   * effect, or had before), throws the refusal that applies (409), or null: the order is as it
   * was, so nothing happened (UNAVAILABLE). Unknown at the deadline: OUTCOME_UNKNOWN.
   */
  settleChange(
    u: UncertainChange,
    orderId: string,
    userId: string,
    decide: (r: OrderRecord & { open?: boolean }) => OrderRecord | OrderRow | null,
  ): Promise<OrderRow> {
    const read = async () =>
      (
        await this.db.query<Array<OrderRecord & { open: boolean }>>(
          `SELECT ${ORDER_COLUMNS}, expires_at > now() AS open FROM orders WHERE id = $1`,
          [orderId],
        )
      )[0];
    return this.untilKnown(
      u.tag,
      u.cause,
      read,
      (found) => {
        if (!found || found.user_id !== userId) throw new OrderNotFoundError(orderId);
        const answer = decide(found);
        if (answer === null) throw new UnavailableError('postgres', this.http.retryAfterS, u.cause);
        return 'user_id' in answer ? toOrderRow(answer) : answer;
      },
      TRANSITION_UNKNOWN,
    );
  }

  /**
   * The loop both settlings share. Within DB_TIMEOUT_MS, retrying every SETTLE_RETRY_MS while
   * PostgreSQL comes back: first whether a statement tagged `tag` is still active or its
   * transaction open, then, once none is, `read` what the write left (a new snapshot: a write that
   * ended after the first query is seen by the second). `decide` turns that into the answer, or
   * throws the answer (UNAVAILABLE when nothing happened, a 404 or 409). Still unknown at the
   * deadline: OUTCOME_UNKNOWN. Counted once as a PostgreSQL error, whatever the end.
   */
  private async untilKnown<R, T>(
    tag: string,
    cause: unknown,
    read: () => Promise<R>,
    decide: (found: R) => T,
    unknownMessage?: string,
  ): Promise<T> {
    this.metrics.dependencyErrors.inc({ dependency: 'postgres' });
    const deadline = Date.now() + this.database.timeoutMs;
    let lastError = cause;
    while (Date.now() < deadline) {
      try {
        const found = await withinMs(deadline - Date.now(), async () =>
          (await this.running(tag)) ? null : { value: await read() },
        );
        if (found) return decide(found.value);
        lastError = new Error('the write is still running in PostgreSQL');
      } catch (err) {
        if (err instanceof DomainError) throw err;
        lastError = err;
      }
      await sleep(Math.min(SETTLE_RETRY_MS, Math.max(0, deadline - Date.now())));
    }
    throw new OutcomeUnknownError(this.http.retryAfterS, lastError, unknownMessage);
  }

  /** Whether a statement of the attempt tagged `tag` is still active or its transaction open. */
  private async running(tag: string): Promise<boolean> {
    const [{ running }] = await this.db.query<Array<{ running: number }>>(
      `SELECT count(*)::int AS running FROM pg_stat_activity
        WHERE pid <> pg_backend_pid() AND state IS DISTINCT FROM 'idle' AND starts_with(query, $1)`,
      [tagged(tag, '')],
    );
    return running > 0;
  }
}

/** Rejects when `work` takes longer than `ms` (its query is left to its own timeouts). */
function withinMs<T>(ms: number, work: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([work(), timeout]).finally(() => clearTimeout(timer));
}
