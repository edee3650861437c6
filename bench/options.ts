// What `npm run bench` can be told (runBenchmark's options with their defaults) and what a run
// plans from them: the bottom of the benchmark, which bench/types.ts's report shapes are made from.
import { join, resolve } from 'node:path';
import { projectRoot } from '../src/infrastructure/project-root';
import { PEER_NAMES } from './cli';
import { pick } from './pick';

/**
 * runBenchmark's options, each at its default; `quick` (a smoke run: short scenarios, a small sweep,
 * a small sale) lowers some of them, and an option given explicitly still wins.
 */
function defaults(quick: boolean) {
  return {
    /** Seconds of load per steady-state scenario. */
    duration: quick ? 3 : 10,
    /**
     * Requests per steady-state scenario (the orders, the GET /health/live floor, the sold-out
     * refusals) instead of `duration` seconds: a run that cannot end a scenario with nothing
     * measured, however slow the machine; null = by duration.
     */
    requests: null as number | null,
    connections: 100,
    /** WORKERS of the locking comparison, the segment sweep and the sale. */
    workers: 2,
    /** WORKERS of the service beside the peers and in the group-commit comparison (a peer is one process). */
    speedWorkers: 1,
    /** Segments of the peer and group-commit comparisons. */
    speedSegments: 20,
    /** The bare peers run beside the service; [] = none, and no GET /health/live floor. */
    peers: [...PEER_NAMES],
    /** ORDER_BATCH_MAX=1 against group commit at every hold time. */
    batch: true,
    /** ORDER_BATCH_MAX of every service start but the ORDER_BATCH_MAX=1 and batch-sweep rows; null = the service's default. */
    batchMax: null as number | null,
    /** ORDER_BATCH_MAX values swept at every hold time, to choose the default; null = no sweep. */
    batchSweep: null as number[] | null,
    /** ORDER_HOLDS_MAX of every service start; null = the service's default. */
    holdsMax: null as number | null,
    /** Node / V8 flags of every service start, beside `npm start`'s heap bound. */
    nodeFlags: [] as string[],
    /** Refusals of a sold-out product to distinct buyers, at speedWorkers. */
    soldOut: true,
    /**
     * The speed load (speedWorkers, hold 0, speedSegments; group commit and ORDER_BATCH_MAX=1) on
     * one redis-server, on a Redlock quorum of three and on a 3-master Redis Cluster.
     */
    redisSetups: true,
    /** Segmented layouts compared against the single lock at every hold time. */
    segments: [20],
    /** ORDER_HOLD_MS values of the comparison. */
    holds: [0, 20],
    /** Segment counts of the sweep; null = no sweep. */
    sweep: (quick ? [1, 5, 20] : [1, 2, 5, 10, 20, 50]) as number[] | null,
    sweepHold: 20,
    /** Also run the no-Redis-lock peer (STOCK_LOCKING=database). */
    peer: true,
    /** The literal sale (e.g. 1000 units, 20 x 50, 5000 buyers, and as 1 segment); false = skip. */
    sale: true,
    saleStock: quick ? 200 : 1000,
    saleSegments: 20,
    saleBuyers: quick ? 1000 : 5000,
    /**
     * The sale with returns (the sale's stock, segments and buyers; then part of it cancelled or
     * expired and resold), in a service start of its own; false = skip.
     */
    returns: true,
    /** Share of the reservations that come back; the rest is paid at once. */
    returnsShare: 0.3,
    /** Share of those cancelled through POST /orders/:id/cancel; the rest expire. */
    returnsCancelShare: 0.5,
    /** The product's paymentTimeoutS: when the unpaid reservations expire (the first sell-out, the pays and the cancels must fit in it). */
    returnsTimeoutS: 10,
    /** EXPIRY_SWEEP_MS of the service start of the sale with returns. */
    returnsSweepMs: 100,
    /** Steady-state stock: large enough that no scenario sells out. */
    steadyStock: 1_000_000,
    /** Seconds of unmeasured load after each service start. */
    warmUp: quick ? 1 : 3,
    lockTtlMs: 2000,
    // Long enough that the single-lock baseline queues rather than refuses under 100 connections
    // (it can sell only ~1/hold per second); every scenario gets the same value.
    lockWaitMs: 30_000,
    lockRetryDelayMs: 4,
    lockRetryJitterMs: 8,
    /** Use these instead of starting PostgreSQL / Redis. */
    databaseUrl: undefined as string | undefined,
    redisUrl: undefined as string | undefined,
    /** Where latest.json and latest.md go (default bench/results). */
    outDir: undefined as string | undefined,
  };
}

export type BenchmarkOptions = Partial<ReturnType<typeof defaults>> & {
  quick?: boolean;
  /** Progress lines (default: stderr). */
  log?: (line: string) => void;
  signal?: AbortSignal;
};

export function resolveOptions(o: BenchmarkOptions, root = projectRoot(__dirname)) {
  const quick = o.quick ?? false;
  const given = Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as BenchmarkOptions;
  const all = { ...defaults(quick), ...given, quick };
  return { ...all, outDir: resolve(all.outDir ?? join(root, 'bench', 'results')) };
}

export type ResolvedOptions = ReturnType<typeof resolveOptions>;

/** What a run plans (plan, bench/scenarios.ts): PlanOptions in bench/types.ts is this function's result. */
export function planOptionsOf(opts: ResolvedOptions) {
  const sale = { stock: opts.saleStock, segments: opts.saleSegments, buyers: opts.saleBuyers, holdMs: opts.sweepHold };
  return {
    ...pick(opts, 'holds', 'segments', 'sweep', 'sweepHold', 'peer', 'steadyStock', 'workers', 'speedWorkers'),
    ...pick(opts, 'speedSegments', 'batchMax', 'peers', 'batch', 'batchSweep', 'soldOut', 'redisSetups'),
    sale: opts.sale ? sale : null,
    /** The sale with returns: the sale's stock, buyers and hold on its segments, and what comes back. */
    returns: opts.returns
      ? {
          ...sale,
          share: opts.returnsShare,
          cancelShare: opts.returnsCancelShare,
          paymentTimeoutS: opts.returnsTimeoutS,
          expirySweepMs: opts.returnsSweepMs,
        }
      : null,
  };
}
