// Prometheus metrics of the order path (prom-client), served at GET /metrics.
import { Injectable } from '@nestjs/common';
import { Counter, collectDefaultMetrics, Histogram, Registry } from 'prom-client';

@Injectable()
export class MetricsService {
  readonly registry = new Registry();

  readonly orders = new Counter({
    name: 'flashsale_orders_total',
    help: 'Order requests by outcome (created or the error code)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly orderSeconds = new Histogram({
    name: 'flashsale_order_duration_seconds',
    help: 'Time to answer POST /orders, by outcome',
    labelNames: ['outcome'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  readonly lockWaitSeconds = new Histogram({
    name: 'flashsale_lock_wait_seconds',
    help: 'Time spent waiting for a busy lock before it was acquired',
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  readonly lockBusy = new Counter({
    name: 'flashsale_segment_lock_busy_total',
    help: 'Segment lock attempts that found the lock held by another request',
    registers: [this.registry],
  });
  readonly fallovers = new Counter({
    name: 'flashsale_segment_fallovers_total',
    help: 'Times an order moved on to another segment (busy, empty or too small)',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  readonly soldOutShortCircuits = new Counter({
    name: 'flashsale_sold_out_short_circuits_total',
    help: 'Orders answered SOLD_OUT from the sold-out flag without touching a segment',
    registers: [this.registry],
  });
  readonly authoritativeChecks = new Counter({
    name: 'flashsale_stock_checks_total',
    help: 'Authoritative stock reads from PostgreSQL after every segment looked empty',
    registers: [this.registry],
  });
  readonly rebalances = new Counter({
    name: 'flashsale_rebalances_total',
    help: 'Completed stock rebalances',
    registers: [this.registry],
  });
  readonly dependencyErrors = new Counter({
    name: 'flashsale_dependency_errors_total',
    help: 'Failed calls to Redis or PostgreSQL',
    labelNames: ['dependency'] as const,
    registers: [this.registry],
  });
  readonly lockExtensions = new Counter({
    name: 'flashsale_lock_extensions_total',
    help: 'Locks extended because their holder was still working',
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'flashsale_' });
  }
}
