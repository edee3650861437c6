// The whole benchmark as one call, runBenchmark(options): PostgreSQL and Redis (given URLs, or
// started here the way the service starts them by default), one service start per configuration,
// every scenario, the reports; everything it started is stopped again, also on errors and aborts.
// bench/run.ts is the CLI around it; test/bench.e2e-spec.ts calls it in-process.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join, resolve } from 'node:path';
import Redis from 'ioredis';
import { Client } from 'pg';
import { startEmbeddedPostgres } from '../src/infrastructure/embedded-postgres';
import { startEmbeddedRedis } from '../src/infrastructure/embedded-redis';
import { runMigrations } from '../src/infrastructure/migrate';
import { projectRoot } from '../src/infrastructure/project-root';
import { BenchmarkReport, ServiceRun, writeReports } from './report';
import { plan, PlanOptions, runScenario, ScenarioResult, warmUp } from './scenarios';
import { ProcessPeak, RssSampler, startService } from './service';

export interface BenchmarkOptions {
  /** Seconds of load per steady-state scenario. */
  duration?: number;
  connections?: number;
  workers?: number;
  /** Segmented layouts compared against the single lock at every hold time. */
  segments?: number[];
  /** ORDER_HOLD_MS values of the comparison. */
  holds?: number[];
  /** Segment counts of the sweep; null = no sweep. */
  sweep?: number[] | null;
  sweepHold?: number;
  /** Also run the no-Redis-lock peer (STOCK_LOCKING=database). */
  peer?: boolean;
  /** The literal sale (e.g. 1000 units, 20 x 50, 5000 buyers, and as 1 segment); false = skip. */
  sale?: boolean;
  saleStock?: number;
  saleSegments?: number;
  saleBuyers?: number;
  /** Steady-state stock: large enough that no scenario sells out. */
  steadyStock?: number;
  /** Seconds of unmeasured load after each service start. */
  warmUp?: number;
  /** A smoke run: short scenarios, a small sweep, a small sale. Explicit options still win. */
  quick?: boolean;
  lockTtlMs?: number;
  lockWaitMs?: number;
  lockRetryDelayMs?: number;
  lockRetryJitterMs?: number;
  /** Use these instead of starting PostgreSQL / Redis. */
  databaseUrl?: string;
  redisUrl?: string;
  /** Where latest.json and latest.md go (default bench/results). */
  outDir?: string;
  /** Progress lines (default: stderr). */
  log?: (line: string) => void;
  signal?: AbortSignal;
}

export type ResolvedOptions = Required<Omit<BenchmarkOptions, 'databaseUrl' | 'redisUrl' | 'signal' | 'log' | 'sweep'>> & {
  sweep: number[] | null;
  databaseUrl?: string;
  redisUrl?: string;
};

export function resolveOptions(o: BenchmarkOptions, root = projectRoot(__dirname)): ResolvedOptions {
  const quick = o.quick ?? false;
  const sale = o.sale ?? true;
  return {
    quick,
    duration: o.duration ?? (quick ? 3 : 10),
    connections: o.connections ?? 100,
    workers: o.workers ?? 2,
    segments: o.segments ?? [20],
    holds: o.holds ?? [0, 20],
    sweep: o.sweep === undefined ? (quick ? [1, 5, 20] : [1, 2, 5, 10, 20, 50]) : o.sweep,
    sweepHold: o.sweepHold ?? 20,
    peer: o.peer ?? true,
    sale,
    saleStock: o.saleStock ?? (quick ? 200 : 1000),
    saleSegments: o.saleSegments ?? 20,
    saleBuyers: o.saleBuyers ?? (quick ? 1000 : 5000),
    steadyStock: o.steadyStock ?? 1_000_000,
    warmUp: o.warmUp ?? (quick ? 1 : 3),
    lockTtlMs: o.lockTtlMs ?? 2000,
    // Long enough that the single-lock baseline queues rather than refuses under 100 connections
    // (it can sell only ~1/hold per second); every scenario gets the same value.
    lockWaitMs: o.lockWaitMs ?? 30_000,
    lockRetryDelayMs: o.lockRetryDelayMs ?? 4,
    lockRetryJitterMs: o.lockRetryJitterMs ?? 8,
    databaseUrl: o.databaseUrl,
    redisUrl: o.redisUrl,
    outDir: resolve(o.outDir ?? join(root, 'bench', 'results')),
  };
}

export interface BenchmarkResult {
  report: BenchmarkReport;
  files: { json: string; md: string };
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T | void> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<void>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

async function machineInfo(databaseUrl: string, redisUrl: string): Promise<BenchmarkReport['machine']> {
  const db = new Client({ connectionString: databaseUrl });
  db.on('error', () => undefined);
  await db.connect();
  let postgres: string;
  try {
    postgres = (await db.query('SELECT version() AS v')).rows[0].v as string;
  } finally {
    await db.end();
  }
  const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
  let redisVersion = 'unknown';
  try {
    await redis.connect();
    const info = await redis.info('server');
    redisVersion = info.match(/^redis_version:(\S+)/m)?.[1] ?? 'unknown';
  } finally {
    redis.disconnect();
  }
  const cpus = os.cpus();
  return {
    cores: cpus.length,
    cpuModel: cpus[0]?.model ?? 'unknown',
    memoryGb: Math.round((os.totalmem() / 1024 ** 3) * 10) / 10,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    postgres,
    redis: redisVersion,
  };
}

export async function runBenchmark(options: BenchmarkOptions = {}): Promise<BenchmarkResult> {
  const root = projectRoot(__dirname);
  const opts = resolveOptions(options, root);
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const signal = options.signal;
  const cleanups: Array<() => Promise<void>> = [];
  const cleanup = async () => {
    while (cleanups.length > 0) await cleanups.pop()!().catch((err: Error) => log(`cleanup: ${err.message}`));
  };
  const checkAbort = () => {
    if (signal?.aborted) throw new Error('benchmark aborted');
  };
  const started = new Date();

  try {
    let databaseUrl = opts.databaseUrl;
    if (!databaseUrl) {
      const dir = mkdtempSync(join(os.tmpdir(), 'flashsale-bench-'));
      cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
      log('starting embedded PostgreSQL ...');
      // The launcher removes embedded-postgres' own signal hooks and stops only a live server.
      const pg = await startEmbeddedPostgres({ dataDir: join(dir, 'pg'), database: 'flashsale_bench', persistent: false });
      cleanups.push(() => pg.stop());
      databaseUrl = pg.url;
    }
    let redisUrl = opts.redisUrl;
    if (!redisUrl) {
      log('starting redis-server ...');
      const redis = await startEmbeddedRedis();
      cleanups.push(() => redis.stop());
      redisUrl = redis.url;
    }
    checkAbort();
    await runMigrations(databaseUrl);
    const machine = await machineInfo(databaseUrl, redisUrl);
    log(`machine: ${machine.cores} cores, ${machine.memoryGb} GB, Node ${machine.node}, ${machine.postgres.split(' on ')[0]}, Redis ${machine.redis}`);

    const db = new Client({ connectionString: databaseUrl });
    // Without a listener a server-side disconnect (PostgreSQL stopped by Ctrl-C) would crash the process before cleanup.
    db.on('error', (err) => log(`PostgreSQL connection: ${err.message}`));
    await db.connect();
    cleanups.push(() => withTimeout(db.end(), 5000, 'closing the PostgreSQL connection'));

    const planOptions: PlanOptions = {
      holds: opts.holds,
      segments: opts.segments,
      sweep: opts.sweep,
      sweepHold: opts.sweepHold,
      peer: opts.peer,
      sale: opts.sale ? { stock: opts.saleStock, segments: opts.saleSegments, buyers: opts.saleBuyers, holdMs: opts.sweepHold } : null,
      steadyStock: opts.steadyStock,
    };
    const configs = plan(planOptions);
    const total = configs.reduce((n, c) => n + c.scenarios.length, 0);
    log(`${total} scenarios in ${configs.length} service configurations, ${opts.connections} connections, ${opts.duration} s each, ${opts.workers} worker(s)`);

    const adminToken = randomBytes(24).toString('base64url');
    const results: ScenarioResult[] = [];
    const services: ServiceRun[] = [];
    let done = 0;
    for (const config of configs) {
      checkAbort();
      log(`service: STOCK_LOCKING=${config.locking} ORDER_HOLD_MS=${config.holdMs} WORKERS=${opts.workers}`);
      const svc = await startService(
        {
          databaseUrl,
          redisUrl,
          adminToken,
          workers: opts.workers,
          stockLocking: config.locking,
          holdMs: config.holdMs,
          lockTtlMs: opts.lockTtlMs,
          lockWaitMs: opts.lockWaitMs,
          lockRetryDelayMs: opts.lockRetryDelayMs,
          lockRetryJitterMs: opts.lockRetryJitterMs,
        },
        signal,
      );
      const sampler = new RssSampler(svc.pid);
      let peaks: ProcessPeak[] = [];
      const stopService = async () => {
        peaks = sampler.stop();
        await svc.stop();
      };
      cleanups.push(stopService);
      try {
        const ctx = { url: svc.url, adminToken, db, workers: opts.workers, connections: opts.connections, durationS: opts.duration, lockWaitMs: opts.lockWaitMs, progress: log, signal };
        if (opts.warmUp > 0) {
          log(`  warm-up ${opts.warmUp} s (not measured)`);
          await warmUp(ctx, opts.warmUp);
        }
        for (const spec of config.scenarios) {
          checkAbort();
          done++;
          log(`[${done}/${total}] ${spec.id}: ${spec.kind === 'sale' ? `${spec.stock} units as ${spec.segments} segment(s), ${spec.buyers} buyers` : `${spec.segments} segment(s), ${opts.duration} s`}`);
          const r = await runScenario(ctx, spec);
          results.push(r);
          const lat = r.latency201Ms;
          log(
            `  => ${r.status === 'ok' ? 'ok' : 'FAILED'}  ${r.ordersPerSec.toFixed(1)} orders/s  p50 ${lat ? lat.p50.toFixed(1) : '-'} ms  p99 ${lat ? lat.p99.toFixed(1) : '-'} ms  ` +
              `codes ${JSON.stringify(r.statusCounts)}${r.status === 'ok' ? '' : `  FAILED: ${r.verification.checks.filter((c) => !c.ok).map((c) => `${c.name} (${c.detail})`).join('; ')}`}`,
          );
          checkAbort();
        }
      } finally {
        cleanups.splice(cleanups.indexOf(stopService), 1);
        await stopService();
        services.push({ locking: config.locking, holdMs: config.holdMs, workers: opts.workers, processes: peaks, rssSupported: sampler.supported });
      }
    }

    const report: BenchmarkReport = {
      startedAt: started.toISOString(),
      finishedAt: new Date().toISOString(),
      // How a user repeats this run: through npm when npm started it, else the node command line.
      command:
        process.env.npm_lifecycle_event === 'bench'
          ? ['npm run bench', ...(process.argv.length > 2 ? ['--', ...process.argv.slice(2)] : [])].join(' ')
          : process.argv.slice(1).join(' '),
      machine,
      settings: {
        quick: opts.quick,
        durationS: opts.duration,
        connections: opts.connections,
        workers: opts.workers,
        holds: opts.holds,
        segments: opts.segments,
        sweep: opts.sweep,
        sweepHold: opts.sweepHold,
        peer: opts.peer,
        sale: planOptions.sale,
        steadyStock: opts.steadyStock,
        warmUpS: opts.warmUp,
        lock: { ttlMs: opts.lockTtlMs, waitMs: opts.lockWaitMs, retryDelayMs: opts.lockRetryDelayMs, retryJitterMs: opts.lockRetryJitterMs },
        dependencies: { postgres: opts.databaseUrl ? 'given DATABASE_URL' : 'embedded (started by the bench)', redis: opts.redisUrl ? 'given REDIS_URL' : 'redis-server (started by the bench)' },
      },
      scenarios: results,
      services,
      rssTargetMb: 250,
    };
    const files = writeReports(report, opts.outDir);
    return { report, files };
  } finally {
    await cleanup();
  }
}
