// Load shedding by criticality: which calls this process refuses with 503 OVERLOADED while its
// event loop is too far behind, decided here and nowhere else (the door asks, per call).
//
// The signal is the mean event-loop delay over the last sample (SHED_SAMPLE_MS), as
// @fastify/under-pressure measures it: a process whose loop runs late answers every call late, and
// a saturated CPU, a stalled process and a burst queued in the process all show there first. Each
// class of call has its own level (SHED_LAG_MS): joins are shed first, then new orders, then what
// settles or follows an order already made; health checks, metrics and the operator's calls never.
// New orders have a second bound: the orders this process already has on the order path
// (SHED_ORDERS_IN_FLIGHT). They wait on segment locks and PostgreSQL, not on the event loop, so
// a saturated order path shows there and not in the loop's delay; a longer queue would be served
// no faster, only later.
// A shed call is refused before any work: no PostgreSQL statement, no Redis command, no effect.
import { Injectable } from '@nestjs/common';
import { OverloadConfig } from '../config/app-config';
import { MetricsService } from '../metrics/metrics.service';

/** The classes of call, least critical first: the order in which they are shed. */
export const SHED_CLASSES = ['join', 'order', 'settle'] as const;
export type ShedClass = (typeof SHED_CLASSES)[number];

@Injectable()
export class LoadShedder {
  /** The latest mean event-loop delay, ms. */
  private delayMs: () => number = () => 0;
  private readonly levels: Record<ShedClass, number>;
  private readonly shedCount: Record<ShedClass, { inc(): void }>;
  private readonly maxOrdersInFlight: number;
  private ordersInFlight = 0;

  constructor(
    config: OverloadConfig,
    private readonly metrics: MetricsService,
  ) {
    const on = config.lagMs.length === SHED_CLASSES.length;
    this.maxOrdersInFlight = config.ordersInFlight === 0 ? Infinity : config.ordersInFlight;
    this.levels = {
      join: on ? config.lagMs[0] : Infinity,
      order: on ? config.lagMs[1] : Infinity,
      settle: on ? config.lagMs[2] : Infinity,
    };
    // Every class's series exists from the start (at 0), so a rate over it reads 0, not "no data".
    for (const c of SHED_CLASSES) metrics.shed.inc({ class: c }, 0);
    // Label lookups once, not per call.
    this.shedCount = {
      join: metrics.shed.labels('join'),
      order: metrics.shed.labels('order'),
      settle: metrics.shed.labels('settle'),
    };
  }

  /** Where the delay is read from (the HTTP server's sampler, attached once it exists). */
  measureWith(delayMs: () => number): void {
    this.delayMs = delayMs;
    this.metrics.loadProbe = { delayMs: () => this.delayMs(), level: () => this.level() };
  }

  /** Whether a call of this class is to be refused now; counts it when it is. */
  sheds(kind: ShedClass): boolean {
    if (this.delayMs() <= this.levels[kind]) return false;
    this.shedCount[kind].inc();
    return true;
  }

  /**
   * A new order may go on to the order path (counted in flight until `done` is called), or is to
   * be refused (counted as shed).
   */
  admitsOrder(): { done: () => void } | null {
    if (this.ordersInFlight >= this.maxOrdersInFlight) {
      this.shedCount.order.inc();
      return null;
    }
    if (this.sheds('order')) return null;
    this.ordersInFlight++;
    let open = true;
    return {
      done: () => {
        if (open) this.ordersInFlight--;
        open = false;
      },
    };
  }

  /** How many classes are shed now (0: none; 3: every class that can be). */
  level(): number {
    const d = this.delayMs();
    return SHED_CLASSES.filter((c) => d > this.levels[c]).length;
  }
}
