// The whole benchmark as one call, runBenchmark(options): PostgreSQL and Redis, one start of the
// service or of a peer per configuration, every scenario, the reports; everything it started is
// stopped again, also on errors and aborts. bench/run.ts is the CLI around it.
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join, relative } from 'node:path';
import Redis from 'ioredis';
import { Client } from 'pg';
import { projectRoot } from '../src/infrastructure/project-root';
import { insertProduct, startPeer } from './peers';
import { RedisSetups } from './redis-setups';
import { redisSetupsSection, writeReports } from './report';
import { steadyLength } from './report/format';
import { createProductViaApi, plan, runScenario, warmUp } from './scenarios';
import { RssSampler, ServiceEnv, serviceReads, startService } from './service';
import { cleanUp, openServers } from './standalone';
import { BenchmarkOptions, planOptionsOf, resolveOptions } from './options';
import { pick } from './pick';
import type {
  BenchmarkReport,
  Machine,
  ProcessConfig,
  ProcessPeak,
  RunContext,
  ScenarioResult,
  ServiceRun,
} from './types';

export type BenchmarkResult = Awaited<ReturnType<typeof runBenchmark>>;

/** The machine a run measured on: BenchmarkReport's `machine`. */
export async function machineInfo(db: Client, redisUrl: string): Promise<Machine> {
  const postgres = (await db.query('SELECT version() AS v')).rows[0].v as string;
  const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
  const info = await redis
    .connect()
    .then(() => redis.info('server'))
    .finally(() => redis.disconnect());
  const cpus = os.cpus();
  return {
    cores: cpus.length,
    cpuModel: cpus[0]?.model ?? 'unknown',
    memoryGb: Math.round((os.totalmem() / 1024 ** 3) * 10) / 10,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    postgres,
    redis: info.match(/^redis_version:(\S+)/m)?.[1] ?? 'unknown',
  };
}

export async function runBenchmark(options: BenchmarkOptions = {}) {
  const root = projectRoot(__dirname);
  const opts = resolveOptions(options, root);
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const signal = options.signal;
  const cleanups: Array<() => Promise<unknown>> = [];
  const checkAbort = () => {
    if (signal?.aborted) throw new Error('benchmark aborted');
  };
  const started = new Date();

  try {
    const given = pick(opts, 'databaseUrl', 'redisUrl');
    const { db, probe: costs, databaseUrl, redisUrl } = await openServers('bench', log, cleanups, given);
    checkAbort();
    const machine = await machineInfo(db, redisUrl);
    log(
      `machine: ${machine.cores} cores, ${machine.memoryGb} GB, Node ${machine.node}, ${machine.postgres.split(' on ')[0]}, Redis ${machine.redis}`,
    );

    const planOptions = planOptionsOf(opts);
    const configs = plan(planOptions);
    const total = configs.reduce((n, c) => n + c.scenarios.length, 0);
    const steadyFor = steadyLength({ durationS: opts.duration, requests: opts.requests });
    log(`${total} scenarios in ${configs.length} process starts, ${opts.connections} connections, ${steadyFor} each`);
    // Until the service reads ORDER_BATCH_MAX, the group-commit rows measure the same code as ORDER_BATCH_MAX=1.
    const batchMaxRead = serviceReads('ORDER_BATCH_MAX', root);
    if (!batchMaxRead) log('note: the built service does not read ORDER_BATCH_MAX; its rows differ only in name');

    // The quorum's and the cluster's servers: started for their first service start, stopped after their last.
    const setups = new RedisSetups(db, redisUrl, costs, log);
    cleanups.push(() => setups.stop());
    const lastStartOn = new Map(configs.map((c, i) => [c.redis, i]));

    const adminToken = randomBytes(24).toString('base64url');
    const results: ScenarioResult[] = [];
    const services: ServiceRun[] = [];
    // What each started process printed (its warnings; with nodeFlags ["--trace-gc"], its GC),
    // one file per start, numbered in start order; the folder holds this run's only.
    const logDir = join(opts.outDir, 'logs');
    rmSync(logDir, { recursive: true, force: true });
    mkdirSync(logDir, { recursive: true });
    for (const [index, config] of configs.entries()) {
      checkAbort();
      const servers = await setups.servers(config.redis);
      checkAbort();
      const described = describe(config, opts.holdsMax);
      log(described);
      const proc = await startTarget(config, { databaseUrl, redis: servers.service, adminToken, opts, signal });
      const sampler = new RssSampler(proc.pid);
      let peaks: ProcessPeak[] = [];
      const stopIt = async () => {
        peaks = sampler.stop();
        await proc.stop();
        writeFileSync(join(logDir, `${String(index + 1).padStart(2, '0')}.log`), `${described}\n\n${proc.output()}`);
      };
      cleanups.push(stopIt);
      try {
        const ctx: RunContext = {
          url: proc.url,
          ...pick(config, 'target', 'workers'),
          // A peer has no admin API: its products go straight into PostgreSQL, the rows the service makes.
          createProduct: (p) =>
            config.target === 'service' ? createProductViaApi(proc.url, adminToken, p) : insertProduct(db, p),
          db,
          redisUrl,
          ...pick(opts, 'connections', 'lockWaitMs'),
          durationS: opts.duration,
          requests: opts.requests,
          targetPid: proc.pid,
          costs: servers.costs,
          progress: log,
          signal,
        };
        if (opts.warmUp > 0) {
          log(`  warm-up ${opts.warmUp} s (not measured)`);
          await warmUp(ctx, opts.warmUp);
        }
        for (const spec of config.scenarios) {
          checkAbort();
          const what = {
            health: `GET /health/live, ${steadyFor}`,
            sale: `${spec.stock} units as ${spec.segments} segment(s), ${spec.buyers} buyers`,
            soldout: `${spec.stock} units as ${spec.segments} segment(s) sold out first, then distinct buyers, ${steadyFor}`,
            returns: `${spec.stock} units as ${spec.segments} segment(s), ${spec.buyers} buyers, then ${Math.round((spec.returnsPlan?.share ?? 0) * 100)}% back and resold (paymentTimeoutS ${spec.returnsPlan?.paymentTimeoutS})`,
            steady: `${spec.segments} segment(s), ${steadyFor}`,
          };
          log(`[${results.length + 1}/${total}] ${spec.id}: ${what[spec.kind]}`);
          const r = await runScenario(ctx, spec);
          results.push(r);
          const lat = r.latency201Ms;
          const unit = spec.kind === 'health' ? 'req' : spec.kind === 'soldout' ? '410' : 'orders';
          const failures = r.verification.checks.filter((c) => !c.ok).map((c) => `${c.name} (${c.detail})`);
          log(
            `  => ${r.status === 'ok' ? 'ok' : 'FAILED'}  ${r.ordersPerSec.toFixed(1)} ${unit}/s  p50 ${lat ? lat.p50.toFixed(1) : '-'} ms  p99 ${lat ? lat.p99.toFixed(1) : '-'} ms  ` +
              `codes ${JSON.stringify(r.statusCounts)}${r.status === 'ok' ? '' : `  FAILED: ${failures.join('; ')}`}`,
          );
          const x = r.returns;
          if (x) {
            log(
              `  => first sell-out ${r.sellOutMs === null ? '-' : (r.sellOutMs / 1000).toFixed(2)} s; back ${x.returnedUnits.cancelled} cancelled + ${x.returnedUnits.expired} expired; ` +
                `${x.cancels.perSec.toFixed(0)} cancels/s; expiry lag p50 ${x.expiryLagMs ? x.expiryLagMs.p50.toFixed(0) : '-'} ms; ` +
                `first return to resale sold out ${x.resale.firstReturnToSoldOutMs === null ? '-' : (x.resale.firstReturnToSoldOutMs / 1000).toFixed(2)} s`,
            );
          }
          checkAbort();
        }
      } finally {
        cleanups.splice(cleanups.indexOf(stopIt), 1);
        await stopIt();
        services.push({
          ...pick(config, 'target', 'locking', 'holdMs', 'workers', 'batchMax', 'expirySweepMs', 'redis'),
          processes: peaks,
          rssSupported: sampler.supported,
        });
      }
      if (lastStartOn.get(config.redis) === index) await setups.release(config.redis);
    }

    const report: BenchmarkReport = {
      startedAt: started.toISOString(),
      finishedAt: new Date().toISOString(),
      command: repeatCommand(),
      machine,
      settings: {
        quick: opts.quick,
        durationS: opts.duration,
        requests: opts.requests,
        ...pick(opts, 'connections', 'workers', 'speedWorkers', 'speedSegments', 'batchMax'),
        batchMaxRead,
        ...pick(opts, 'holdsMax', 'nodeFlags', 'peers', 'batch', 'batchSweep', 'soldOut', 'redisSetups', 'holds'),
        ...pick(opts, 'segments', 'sweep', 'sweepHold', 'peer'),
        ...pick(planOptions, 'sale', 'returns', 'steadyStock'),
        warmUpS: opts.warmUp,
        lock: {
          ttlMs: opts.lockTtlMs,
          waitMs: opts.lockWaitMs,
          retryDelayMs: opts.lockRetryDelayMs,
          retryJitterMs: opts.lockRetryJitterMs,
        },
        dependencies: {
          postgres: opts.databaseUrl ? 'given DATABASE_URL' : 'embedded (started by the bench)',
          redis: opts.redisUrl ? 'given REDIS_URL' : 'redis-server (started by the bench)',
        },
      },
      scenarios: results,
      services,
      // Issue 8's bound for one service process.
      rssTargetMb: 200,
    };
    const section = redisSetupsSection(report);
    if (section) report.redisSetups = section;
    const files = writeReports(report, opts.outDir);
    return { report, files };
  } finally {
    await cleanUp(cleanups, log);
  }
}

const REDIS_DESCRIBED = {
  single: '',
  quorum: ' Redis: Redlock quorum of 3 (REDIS_LOCK_URLS)',
  cluster: ' Redis: 3-master cluster (REDIS_CLUSTER_NODES)',
};

function describe(c: ProcessConfig, holdsMax: number | null): string {
  if (c.target !== 'service')
    return `peer ${c.target}${c.target === 'bare' ? `: STOCK_LOCKING=${c.locking}` : ':'} ORDER_HOLD_MS=${c.holdMs}`;
  return `service: ORDER_HOLD_MS=${c.holdMs} WORKERS=${c.workers} ORDER_BATCH_MAX=${c.batchMax ?? '(unset)'}${holdsMax !== null ? ` ORDER_HOLDS_MAX=${holdsMax}` : ''}${c.expirySweepMs !== null ? ` EXPIRY_SWEEP_MS=${c.expirySweepMs}` : ''}${REDIS_DESCRIBED[c.redis]}`;
}

/** The service with this configuration's environment and Redis setup, or the peer (on the one redis-server); the same lock settings for both. */
function startTarget(
  c: ProcessConfig,
  x: Pick<ServiceEnv, 'databaseUrl' | 'redis' | 'adminToken'> & {
    opts: ReturnType<typeof resolveOptions>;
    signal?: AbortSignal;
  },
) {
  const { opts } = x;
  const locks = pick(opts, 'lockTtlMs', 'lockWaitMs', 'lockRetryDelayMs', 'lockRetryJitterMs');
  if (c.target === 'service') {
    if (c.locking !== 'redlock') throw new Error(`the service has no ${c.locking} mode`);
    return startService(
      {
        ...pick(x, 'databaseUrl', 'redis', 'adminToken'),
        ...pick(c, 'workers', 'holdMs', 'batchMax', 'expirySweepMs'),
        ...pick(opts, 'holdsMax', 'nodeFlags'),
        ...locks,
      },
      x.signal,
    );
  }
  if (!('url' in x.redis) || x.redis.lockUrls) throw new Error('a peer runs on the one redis-server only');
  return startPeer(
    c.target,
    {
      databaseUrl: x.databaseUrl,
      redisUrl: x.redis.url,
      locking: c.locking === 'database' ? 'database' : 'redlock',
      holdMs: c.holdMs,
      ...locks,
    },
    x.signal,
  );
}

/**
 * How a user repeats this run: through npm when npm started it (the top's `npm run bench` runs the
 * workspace's start script), else the node command line, from the folder it ran in.
 */
function repeatCommand(): string {
  const args = process.argv.slice(2);
  if (process.env.npm_lifecycle_event) return ['npm run bench', ...(args.length > 0 ? ['--', ...args] : [])].join(' ');
  return ['node', relative(process.cwd(), process.argv[1]), ...args].join(' ');
}
