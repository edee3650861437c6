// Prometheus metrics of the order path (prom-client), served at GET /metrics. With WORKERS > 1
// any worker answers with the sum over all workers, gathered by the cluster primary.
import cluster from 'node:cluster';
import { Injectable } from '@nestjs/common';
import { AggregatorRegistry, Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

const ASK = 'flashsale:metrics-req';
const ANSWER = 'flashsale:metrics-res';

/** In the cluster primary: answers workers' requests with every worker's metrics aggregated. */
export function serveClusterMetrics(): void {
  const aggregator = new AggregatorRegistry();
  cluster.on('message', (worker, msg: { type?: string; id?: number }) => {
    if (msg?.type !== ASK) return;
    aggregator.clusterMetrics().then(
      (text) => worker.send({ type: ANSWER, id: msg.id, text }),
      () => worker.send({ type: ANSWER, id: msg.id }),
    );
  });
}

@Injectable()
export class MetricsService {
  readonly registry = new Registry();

  /** A gauge per product that each process sets from what it read: /metrics over the workers shows the highest. */
  private productGauge(name: string, help: string) {
    return new Gauge({ name, help, labelNames: ['product'] as const, registers: [this.registry], aggregator: 'max' });
  }

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
  readonly lockAttempts = new Counter({
    name: 'flashsale_segment_lock_attempts_total',
    help: 'Segment lock attempts by Redis master (on a Redis Cluster the master owning the lock key; else "quorum") and outcome',
    labelNames: ['master', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly redisMasterUp = new Gauge({
    name: 'flashsale_redis_master_up',
    help: 'Whether each Redis master (cluster master, or lock master / hint server) answered its last ping (1) or not (0)',
    labelNames: ['master'] as const,
    // Over the workers of a process: down in any of them reads as down.
    aggregator: 'min',
    registers: [this.registry],
  });
  readonly lockBusy = new Counter({
    name: 'flashsale_segment_lock_busy_total',
    help: 'Segment lock attempts that found the lock held by another request',
    registers: [this.registry],
  });
  readonly fallovers = new Counter({
    name: 'flashsale_segment_fallovers_total',
    help: 'Times an order moved on to another segment (busy, empty or too small, unreachable: its Redis Cluster master did not answer)',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  readonly soldOutShortCircuits = new Counter({
    name: 'flashsale_sold_out_short_circuits_total',
    help: 'Orders answered SOLD_OUT from the sold-out flag without touching a segment',
    registers: [this.registry],
  });
  readonly staleSoldOutFlags = new Counter({
    name: 'flashsale_stale_sold_out_flags_total',
    help: 'Redis sold-out flags found wrong by PostgreSQL (their clearing was lost) and cleared',
    registers: [this.registry],
  });
  readonly inProcessRefusals = new Counter({
    name: 'flashsale_in_process_refusals_total',
    help: 'POST /orders answered from what this process knows of a sold-out product (SOLD_OUT, ALREADY_ORDERED), with no PostgreSQL or Redis call',
    labelNames: ['code'] as const,
    registers: [this.registry],
  });
  /** What the load shedder sees, read at each scrape (set by LoadShedder.measureWith). */
  loadProbe: { delayMs(): number; level(): number } = { delayMs: () => 0, level: () => 0 };
  readonly shed = new Counter({
    name: 'flashsale_shed_total',
    help: 'Calls refused 503 OVERLOADED at the door, by class (join, order, settle)',
    labelNames: ['class'] as const,
    registers: [this.registry],
  });
  readonly eventLoopDelay: Gauge = new Gauge({
    name: 'flashsale_event_loop_delay_seconds',
    help: "Mean event-loop delay over the load shedder's last sample (SHED_SAMPLE_MS)",
    aggregator: 'max',
    registers: [this.registry],
    collect: (): void => this.eventLoopDelay.set(this.loadProbe.delayMs() / 1000),
  });
  readonly sheddingLevel: Gauge = new Gauge({
    name: 'flashsale_shedding_level',
    help: 'Classes of call being shed now: 0 none, 1 joins, 2 joins and new orders, 3 every class that can be',
    aggregator: 'max',
    registers: [this.registry],
    collect: (): void => this.sheddingLevel.set(this.loadProbe.level()),
  });
  readonly soldOutBoardProducts = new Gauge({
    name: 'flashsale_sold_out_board_products',
    help: 'Sold-out products whose refusals this process answers from memory',
    registers: [this.registry],
  });
  readonly rateLimited = new Counter({
    name: 'flashsale_rate_limited_total',
    help: 'Buyer calls answered 429 RATE_LIMITED, by the limit that refused them (user, ip)',
    labelNames: ['limit'] as const,
    registers: [this.registry],
  });
  readonly rateLimitStoreErrors = new Counter({
    name: 'flashsale_rate_limit_fallbacks_total',
    help: 'Rate-limit decisions taken by the process alone because Redis did not answer',
    registers: [this.registry],
  });
  readonly authRefusals = new Counter({
    name: 'flashsale_auth_refusals_total',
    help: 'Calls refused at the door for their credentials, by code (UNAUTHENTICATED, IDENTITY_MISMATCH, FORBIDDEN)',
    labelNames: ['code'] as const,
    registers: [this.registry],
  });
  readonly authoritativeChecks = new Counter({
    name: 'flashsale_stock_checks_total',
    help: 'Authoritative stock reads from PostgreSQL after every segment looked empty',
    registers: [this.registry],
  });
  readonly batchRetries = new Counter({
    name: 'flashsale_order_batch_retries_total',
    help: 'Group-commit statements refused by CHECK (stock >= 0) and run again inside a transaction that locked the segment first',
    registers: [this.registry],
  });
  readonly orderTransitions = new Counter({
    name: 'flashsale_order_transitions_total',
    help: 'Orders that left the reserved state, by the state they went to (paid, cancelled, expired)',
    labelNames: ['to'] as const,
    registers: [this.registry],
  });
  readonly unitsReturned = new Counter({
    name: 'flashsale_units_returned_total',
    help: 'Units put back on sale, by why (cancelled, expired)',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  readonly restockedUnits = new Counter({
    name: 'flashsale_units_restocked_total',
    help: 'Units added by restocks',
    registers: [this.registry],
  });
  readonly sweepSeconds = new Histogram({
    name: 'flashsale_expiry_sweep_duration_seconds',
    help: 'Time one expiry sweep of this process took (every product with reservations past expiresAt)',
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  readonly expiryLagSeconds = new Histogram({
    name: 'flashsale_expiry_lag_seconds',
    help: 'How long after its expiresAt a reservation was expired and its units returned',
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
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
  readonly batchSize = new Histogram({
    name: 'flashsale_order_batch_size',
    help: 'Orders sold in one segment lock hold and one statement (group commit), for holds that served riders',
    buckets: [2, 4, 8, 16, 32, 64, 128],
    registers: [this.registry],
  });
  readonly lockExtensions = new Counter({
    name: 'flashsale_lock_extensions_total',
    help: 'Locks extended because their holder was still working',
    registers: [this.registry],
  });
  readonly lockExtensionFailures = new Counter({
    name: 'flashsale_lock_extension_failures_total',
    help: 'Lock extensions that failed, by reason (expired, not_held, unreachable, error): the holder went on, its lock may have lapsed',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  readonly fencedWrites = new Counter({
    name: 'flashsale_fenced_writes_total',
    help: 'Sale writes PostgreSQL refused for a stale fencing token: a holder that outlived its segment lock, or a token counter that fell behind (nothing written)',
    registers: [this.registry],
  });

  private asked = 0;
  readonly queueJoins = new Counter({
    name: 'flashsale_queue_joins_total',
    help: 'Waiting-room joins by outcome: new (a ticket made), existing (the user had one), or the refusal code',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly proofOfWork = new Counter({
    name: 'flashsale_proof_of_work_total',
    help: 'Joins of proof-of-work products by the solution: accepted, required (none), invalid, replayed (used already)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly proofOfWorkStep = this.productGauge(
    'flashsale_proof_of_work_step',
    "The difficulty's step in force for new challenges (0 at rest), per product, as this process counts joins",
  );
  readonly queuePolls = new Counter({
    name: 'flashsale_queue_polls_total',
    help: 'Waiting-room ticket reads by the status answered',
    labelNames: ['status'] as const,
    registers: [this.registry],
  });
  readonly queueAdmitted = new Counter({
    name: 'flashsale_queue_admitted_total',
    help: 'Queue positions admitted (admission steps this process made)',
    labelNames: ['product'] as const,
    registers: [this.registry],
  });
  readonly queueWaiting = this.productGauge(
    'flashsale_queue_waiting',
    'Queue positions handed out and not yet admitted, per product',
  );
  readonly queuePreQueue = this.productGauge(
    'flashsale_queue_pre_queue',
    'Tickets in the pre-queue, per product: counted as it fills before the start, then its drawn size',
  );
  readonly queueOutstanding = this.productGauge(
    'flashsale_queue_admissions_outstanding',
    'Admissions neither spent by an order nor expired, per product',
  );
  readonly queueUnitsLeft = this.productGauge(
    'flashsale_queue_units_left',
    'Units left of a product with a waiting room, as its admission clock last read them',
  );
  readonly queueAdmissionRate = this.productGauge(
    'flashsale_queue_admission_rate',
    'Positions admitted per second over the last 30 seconds, per product (what the estimated waits use)',
  );
  readonly queueAdmissionsPaused = this.productGauge(
    'flashsale_queue_admissions_paused',
    "1 while a product's admission clocks are paused (no unit left, admissions held), else 0",
  );
  readonly queueEtaError = new Histogram({
    name: 'flashsale_queue_eta_error_seconds',
    help: "How far a ticket's admission was from the first estimate this process gave it (absolute)",
    buckets: [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300],
    registers: [this.registry],
  });

  readonly eventsServed = new Counter({
    name: 'flashsale_events_served_total',
    help: 'Order and product events handed to readers of GET /events, by how they read (poll or sse)',
    labelNames: ['via'] as const,
    registers: [this.registry],
  });
  readonly eventsPruned = new Counter({
    name: 'flashsale_events_pruned_total',
    help: 'Events deleted after EVENTS_RETENTION_S',
    registers: [this.registry],
  });
  readonly webhookDeliveries = new Counter({
    name: 'flashsale_webhook_deliveries_total',
    help: 'Webhook POSTs (each a batch of events) by outcome: delivered, failed (an answer other than 2xx), timeout, error (no answer)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly webhookEventsDelivered = new Counter({
    name: 'flashsale_webhook_events_delivered_total',
    help: 'Events the webhook receiver acknowledged with a 2xx',
    registers: [this.registry],
  });
  readonly webhookDeadLetters = new Counter({
    name: 'flashsale_webhook_dead_letters_total',
    help: 'Events set aside as dead letters after WEBHOOK_MAX_ATTEMPTS failed deliveries',
    registers: [this.registry],
  });
  readonly webhookLagSeconds = new Gauge({
    name: 'flashsale_webhook_lag_seconds',
    help: 'Age of the oldest event not yet delivered to the webhook (0: caught up), as the delivering process last saw it',
    registers: [this.registry],
    aggregator: 'max',
  });

  readonly clientAborts = new Counter({
    name: 'flashsale_client_aborts_total',
    help: 'Requests whose client went away before the request was read or answered (a client fault, logged at debug)',
    registers: [this.registry],
  });
  readonly connectionsRefused = new Counter({
    name: 'flashsale_connections_refused_total',
    help: 'Connections closed as they opened because their address already held MAX_CONNECTIONS_PER_IP',
    registers: [this.registry],
  });
  readonly requestTimeouts = new Counter({
    name: 'flashsale_request_timeouts_total',
    help: 'Connections cut because their request did not arrive within HEADERS_TIMEOUT_MS or REQUEST_TIMEOUT_MS',
    registers: [this.registry],
  });
  private readonly pending = new Map<number, (text?: string) => void>();

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'flashsale_' });
    if (cluster.isWorker) {
      // prom-client's worker side answers the primary's aggregation requests from these registries.
      new AggregatorRegistry();
      AggregatorRegistry.setRegistries([this.registry]);
      process.on('message', (msg: { type?: string; id?: number; text?: string }) => {
        if (msg?.type !== ANSWER || msg.id === undefined) return;
        this.pending.get(msg.id)?.(msg.text);
        this.pending.delete(msg.id);
      });
    }
  }

  /** The metrics text: this process's alone, or the whole cluster's when running as a worker. */
  async render(): Promise<string> {
    if (!cluster.isWorker || !process.send) return this.registry.metrics();
    const id = ++this.asked;
    const text = await new Promise<string | undefined>((resolve) => {
      const timer = setTimeout(() => resolve(undefined), 2000);
      this.pending.set(id, (t) => {
        clearTimeout(timer);
        resolve(t);
      });
      process.send?.({ type: ASK, id });
    });
    this.pending.delete(id);
    return text ?? this.registry.metrics();
  }
}
