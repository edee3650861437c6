// The shapes the benchmark's modules share (a scenario, the sale with returns, a run's report) and
// the constants they are made from. This file imports only what lies below it (the options, the
// load, the costs, the metrics, the harness's verification), so every module that runs scenarios or
// renders them can import it without a circle.
import type { Client } from 'pg';
import type { Verification } from '../harness/verify';
import type { CostProbe, RedisServerCosts, ScenarioCosts } from './costs';
import type { Latency, LoadResult } from './load';
import type { MetricDeltas } from './metrics';
import type { planOptionsOf, ResolvedOptions } from './options';

// What a run plans and each scenario measures.

export type StockLocking = 'redlock' | 'database';
/**
 * How a scenario's stock is guarded: Redlock segments (the service, the bare peer), PostgreSQL row locks
 * only (the bare peer's no-lock mode), or the bare-lua peer's Redis count.
 */
export type Locking = StockLocking | 'lua';
/** What serves the load: the built service, or one of the bare peers (bench/peers). */
export type Target = 'service' | 'bare' | 'bare-lua';
/** The hold of the segments-against-one-lock target, which bare-held runs the bare peer at. */
export const BARE_HELD_MS = 20;
/**
 * The Redis behind a service start: the bench's one redis-server (every scenario but the quorum and
 * cluster rows); a Redlock quorum of three independent servers (REDIS_LOCK_URLS: the main one and
 * two more, REDIS_URL the main one); a 3-master Redis Cluster (REDIS_CLUSTER_NODES only).
 */
export const REDIS_SETUPS = ['single', 'quorum', 'cluster'] as const;
export type RedisSetup = (typeof REDIS_SETUPS)[number];

export type Group =
  /** The service against the bare peers and GET /health/live, hold 0 (issue 8, part 1). */
  | 'speed'
  /** ORDER_BATCH_MAX=1 against group commit, per hold time (issue 8, part 3). */
  | 'batch'
  /** A few ORDER_BATCH_MAX values, to choose the default by measurement. */
  | 'batch-sweep'
  /** Refusals of a sold-out product to distinct buyers: most of the traffic of a big sale (issue 10). */
  | 'soldout'
  /** Redlock segments against one lock and the no-Redis-lock mode, per hold time. */
  | 'compare'
  | 'sweep'
  | 'sale'
  /** The sale, then 30% of its reservations back (cancelled or expired) and resold. */
  | 'returns'
  /** The same load on one redis-server, a Redlock quorum of three and a 3-master Redis Cluster (issue 10). */
  | 'redis-setups';

export interface ScenarioSpec {
  /**
   * Stable id, e.g. `redlock-h20-s20`, `redlock-w1-b1-h0-s20`, `bare-lua-h0-s20`, `soldout-redlock-w1-h0-s20`,
   * `sale-redlock-h20-s1`, `returns-redlock-h20-s20`; `-rq` / `-rc` at the end on a Redlock quorum / a Redis Cluster.
   */
  id: string;
  /**
   * steady: orders for a fixed time; sale: one order per buyer until sold out; health: GET
   * /health/live for a fixed time; soldout: orders of distinct buyers for a fixed time to a product
   * sold out before the load; returns: the sale, then part of it cancelled or expired and resold.
   */
  kind: 'steady' | 'sale' | 'health' | 'soldout' | 'returns';
  /** Why the scenario is in the run; one measurement may serve several sections. */
  groups: Group[];
  target: Target;
  locking: Locking;
  /** Service processes (WORKERS); a peer is always one process. */
  workers: number;
  /** ORDER_BATCH_MAX given to the service; null = unset (the service's default), and for peers. */
  batchMax: number | null;
  holdMs: number;
  segments: number;
  stock: number;
  /** The sale (and the sale with returns): one request per distinct buyer. */
  buyers?: number;
  /** The sale with returns only: what goes back and how. */
  returnsPlan?: ReturnsPlan;
  /** The Redis the service runs on; absent = single (the bench's one redis-server, as in reports written before setups existed). */
  redis?: RedisSetup;
}

/** How much of the sale with returns comes back, and the service settings that decide when (BenchmarkOptions' returns*). */
export type ReturnsPlan = Omit<NonNullable<PlanOptions['returns']>, 'stock' | 'segments' | 'buyers' | 'holdMs'>;

export interface ScenarioResult
  extends
    ScenarioSpec,
    Pick<LoadResult, 'elapsedS' | 'responses' | 'statusCounts' | 'created' | 'errors' | 'timeouts'> {
  productId: number | null;
  connections: number;
  /** 201s per second (200s for GET /health/live, 410s for the sold-out product): over the load (steady), or until the last unit sold (sale). */
  ordersPerSec: number;
  /** Latencies of the success answers only. */
  latency201Ms: Latency | null;
  /** The sale (and the first sell-out of the sale with returns): ms from the first request to the last 201. */
  sellOutMs: number | null;
  /** Orders in PostgreSQL once the target went quiet (includes answers autocannon hung up on). */
  ordersInDb: number;
  metrics: MetricDeltas;
  /** What the scenario cost Redis, PostgreSQL and the target's processes, per order or per answer; null where not read (the sale with returns). */
  costs: ScenarioCosts | null;
  verification: Verification;
  status: 'ok' | 'FAILED';
  /** The sale with returns only: its own figures (pays, cancels, expiry lag, the resale). */
  returns?: ReturnsFigures;
}

/** What a run plans (planOptionsOf): runBenchmark's options (BenchmarkOptions says what each is), resolved. */
export type PlanOptions = Omit<ReturnType<typeof planOptionsOf>, 'redisSetups'> & {
  /** Absent in reports written before the Redis setups existed. */
  redisSetups?: boolean;
};

/** What one process start runs: the service with one environment, or a peer. */
type Start = Pick<ScenarioSpec, 'target' | 'locking' | 'holdMs' | 'workers' | 'batchMax'>;

export interface ProcessConfig extends Start {
  /** EXPIRY_SWEEP_MS given to the service; null = unset (the service's default). */
  expirySweepMs: number | null;
  /** The Redis the service runs on (a peer: always single). */
  redis: RedisSetup;
  scenarios: ScenarioSpec[];
}

export interface RunContext extends Pick<Start, 'target' | 'workers'> {
  url: string;
  /** A fresh product: through POST /admin/products for the service, straight into PostgreSQL for a peer (which has no payment timeout). */
  createProduct: (p: NewProduct) => Promise<number>;
  db: Client;
  redisUrl: string;
  connections: number;
  durationS: number;
  /** Requests per steady scenario instead of durationS; null = by durationS. */
  requests: number | null;
  lockWaitMs: number;
  /** The process serving the load (the service's primary, or the peer), whose CPU the costs count with its children. */
  targetPid: number;
  /** Reads the costs around a scenario. */
  costs: CostProbe;
  progress: (line: string) => void;
  signal?: AbortSignal;
}

export interface NewProduct {
  name: string;
  stock: number;
  segments: number;
  /** Seconds a reservation may stay unpaid (the service's default when unset). */
  paymentTimeoutS?: number;
  /** The sale's start (ISO 8601); unset: open. */
  startsAt?: string;
  /** A waiting room in front of the sale (bench:queue), its admissions' lifetime, proof of work on its joins. */
  waitingRoom?: boolean;
  admissionTtlS?: number;
  proofOfWork?: boolean;
}

// The sale with returns.

export type Fate = 'pay' | 'cancel' | 'expire';

/** Exact distribution figures of a list of values (nearest rank), in ms. */
export interface Spread {
  count: number;
  p50: number;
  p99: number;
  max: number;
}

/** A batch of pay or cancel calls of the shop's backend. */
export interface CallFigures {
  calls: number;
  /** Answered 200. */
  ok: number;
  statusCounts: Record<string, number>;
  /** From the first call sent to the last answer. */
  elapsedMs: number;
  /** 200s per second over elapsedMs. */
  perSec: number;
  latencyMs: Latency | null;
}

export interface ReturnsFigures {
  paymentTimeoutS: number;
  expirySweepMs: number;
  /** What the run meant to do with the first sale's reservations (fates dealt as their 201s arrived). */
  planned: Record<Fate, number>;
  /** The reservations to pay, paid right after the first sell-out and before any return. */
  pays: CallFigures;
  /** The reservations to cancel, cancelled after the pays while the new buyers already ask. */
  cancels: CallFigures;
  /** Expired orders, from PostgreSQL: closed_at - expires_at, i.e. expiresAt to units back on sale. */
  expiryLagMs: Spread | null;
  /** Units that came back, from PostgreSQL. */
  returnedUnits: { cancelled: number; expired: number };
  resale: {
    /** POST /orders of the new buyers: one distinct buyer per request, until every returned unit sold again. */
    requests: number;
    statusCounts: Record<string, number>;
    created: number;
    /** Seconds from the new buyers' first request to their last answer. */
    elapsedS: number;
    latency201Ms: Latency | null;
    /** Answers to the new buyers' payments (each sent as soon as its reservation was answered). */
    paysStatusCounts: Record<string, number>;
    /** PostgreSQL: from the first returned unit back on sale to the last resale order. */
    firstReturnToSoldOutMs: number | null;
    /** PostgreSQL: from the last returned unit back on sale to the last resale order. */
    lastReturnToSoldOutMs: number | null;
    /** PostgreSQL: how long each returned unit was on sale before it sold again (k-th return paired with the k-th resale). */
    onSaleMs: Spread | null;
  };
  /** The product's orders by status at the end, from PostgreSQL. */
  statuses: { reserved: number; paid: number; cancelled: number; expired: number };
}

// The report of a run (latest.json).

/** The machine a run measured on (machineInfo, bench/benchmark.ts). */
export interface Machine {
  cores: number;
  cpuModel: string;
  memoryGb: number;
  os: string;
  node: string;
  postgres: string;
  redis: string;
}

/** One process of a service start, with the highest RSS sampled (RssSampler, bench/service.ts). */
export interface ProcessPeak {
  pid: number;
  role: 'primary' | 'worker';
  peakRssMb: number;
}

/** What a scenario of the Redis setups cost Redis per order, summed over the setup's servers or on one. */
export type RedisPerOrder = Pick<RedisServerCosts['perUnit'], 'redisScripts' | 'redisCommands' | 'redisCpuUs'>;

/** One row of the Redis setups section: a setup at one ORDER_BATCH_MAX (redisSetupsSection, bench/report/redis-setups.ts). */
export interface RedisSetupRow extends Pick<ScenarioResult, 'id' | 'batchMax' | 'status' | 'ordersPerSec'> {
  setup: RedisSetup;
  p99Ms: number | null;
  /** Summed over every Redis server of the setup; null when the costs were not read. */
  perOrder: RedisPerOrder | null;
  /** Each server of the setup (a quorum's or a cluster's masters, in the setup's order); null for the one redis-server. */
  perServer: Array<RedisPerOrder & { server: string }> | null;
  /** This row / the one redis-server's row at the same ORDER_BATCH_MAX; null where either figure is missing. */
  vsSingle: Record<'ordersPerSec' | 'p99' | 'redisScripts' | 'redisCommands' | 'redisCpuUs', number | null>;
}

/** The Redis setups group's rows with their ratios to the one redis-server; `command` repeats the run. */
export interface RedisSetupsSection {
  command: string;
  workers: number;
  segments: number;
  holdMs: number;
  rows: RedisSetupRow[];
}

/** One process start as it ran; reports written before EXPIRY_SWEEP_MS and the Redis setups lack them (the default, single). */
export interface ServiceRun extends Start, Partial<Pick<ProcessConfig, 'expirySweepMs' | 'redis'>> {
  processes: ProcessPeak[];
  rssSupported: boolean;
}

export interface BenchmarkReport {
  startedAt: string;
  finishedAt: string;
  command: string;
  machine: Machine;
  settings: PlanOptions &
    Pick<ResolvedOptions, 'quick' | 'connections' | 'holdsMax'> & {
      durationS: number;
      /** Requests per steady scenario instead of durationS (absent or null: by durationS). */
      requests?: number | null;
      warmUpS: number;
      /** Whether the built service reads ORDER_BATCH_MAX at all (before it did, the group-commit rows measured ORDER_BATCH_MAX=1). */
      batchMaxRead: boolean;
      /** Node / V8 flags of every service start beside the heap bound (absent in reports before them). */
      nodeFlags?: string[];
      lock: { ttlMs: number; waitMs: number; retryDelayMs: number; retryJitterMs: number };
      dependencies: { postgres: string; redis: string };
    };
  scenarios: ScenarioResult[];
  services: ServiceRun[];
  rssTargetMb: number;
  /** The Redis setups group's rows with their ratios to the one redis-server (absent when the group did not run). */
  redisSetups?: RedisSetupsSection;
}
