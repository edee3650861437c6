// Starts the built service (WORKERS processes on one port) for one benchmark configuration, and
// samples the resident memory of its primary and worker processes.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { projectRoot } from '../src/infrastructure/project-root';
import { childrenOf, launchService, ServiceProcess } from '../harness/launcher';
import { readProc } from './costs';
import type { ProcessConfig, ProcessPeak } from './types';

/** Where the service finds Redis: REDIS_URL (and REDIS_LOCK_URLS for a Redlock quorum), or REDIS_CLUSTER_NODES alone (the service refuses it beside either). */
export type ServiceRedis = { url: string; lockUrls?: string[] } | { clusterNodes: string[] };

/** --max-old-space-size of every benchmark start: the bound `npm start` sets (package.json), so memory is measured as users run it. */
export const SERVICE_HEAP_MB = 128;

/** The lock settings of every start, the service's and the bare peer's alike. */
export interface LockSettings {
  lockTtlMs: number;
  lockWaitMs: number;
  lockRetryDelayMs: number;
  lockRetryJitterMs: number;
}

/** A start's settings (ORDER_BATCH_MAX, EXPIRY_SWEEP_MS: null leaves them unset, the service's default) and servers. */
export type ServiceEnv = Pick<ProcessConfig, 'workers' | 'holdMs' | 'batchMax' | 'expirySweepMs'> &
  LockSettings & {
    databaseUrl: string;
    redis: ServiceRedis;
    adminToken: string;
    /** ORDER_HOLDS_MAX; null or absent leaves it unset (the service's default). */
    holdsMax?: number | null;
    /** Node / V8 flags beside the heap bound; none, as `npm start`, when absent. */
    nodeFlags?: string[];
  };

/** The shop's token of every service the benchmark starts (pay and cancel calls carry it). */
export const BENCH_SHOP_TOKEN = 'bench-shop-token-0123456789abcdef';

// Every service start's database, tokens, no rate limits and no load shedding: the order path is
// measured at saturation without the door's budgets (one address, many buyers) and without calls
// shed on a busy machine; the door's own scenarios set the budgets, bench:overload the shedding.
export const benchEnv = (databaseUrl: string, adminToken: string) => ({
  DATABASE_URL: databaseUrl,
  ADMIN_TOKEN: adminToken,
  SHOP_TOKEN: BENCH_SHOP_TOKEN,
  RATE_LIMIT_USER: '0',
  RATE_LIMIT_IP: '0',
  SHED_LAG_MS: 'off',
  SHED_ORDERS_IN_FLIGHT: '0',
});

/** One benchmark configuration of the service, through the launcher the e2e tests use too. */
export function startService(env: ServiceEnv, signal?: AbortSignal): Promise<ServiceProcess> {
  return launchService({
    heapMb: SERVICE_HEAP_MB,
    nodeFlags: env.nodeFlags,
    startTimeoutMs: 90_000,
    signal,
    env: {
      NODE_ENV: 'production',
      ...benchEnv(env.databaseUrl, env.adminToken),
      ...('clusterNodes' in env.redis
        ? { REDIS_CLUSTER_NODES: env.redis.clusterNodes.join(',') }
        : {
            REDIS_URL: env.redis.url,
            ...(env.redis.lockUrls ? { REDIS_LOCK_URLS: env.redis.lockUrls.join(',') } : {}),
          }),
      WORKERS: String(env.workers),
      ORDER_HOLD_MS: String(env.holdMs),
      ...(env.batchMax !== null ? { ORDER_BATCH_MAX: String(env.batchMax) } : {}),
      ...(env.holdsMax != null ? { ORDER_HOLDS_MAX: String(env.holdsMax) } : {}),
      ...(env.expirySweepMs !== null ? { EXPIRY_SWEEP_MS: String(env.expirySweepMs) } : {}),
      LOCK_TTL_MS: String(env.lockTtlMs),
      LOCK_WAIT_MS: String(env.lockWaitMs),
      // An order's wait is bounded by the lock wait; PostgreSQL's statements get the same bound.
      DB_TIMEOUT_MS: String(env.lockWaitMs),
      LOCK_RETRY_DELAY_MS: String(env.lockRetryDelayMs),
      LOCK_RETRY_JITTER_MS: String(env.lockRetryJitterMs),
    },
  });
}

/**
 * Whether the built service reads an environment variable at all (its name appears in dist/src):
 * a setting it does not know is ignored, and two scenarios that differ only in it measure the same code.
 */
export function serviceReads(name: string, root = projectRoot(__dirname)): boolean {
  const search = (dir: string): boolean =>
    readdirSync(dir, { withFileTypes: true }).some((e) =>
      e.isDirectory()
        ? search(join(dir, e.name))
        : e.name.endsWith('.js') && readFileSync(join(dir, e.name), 'utf8').includes(name),
    );
  const dir = join(root, 'dist', 'src');
  return existsSync(dir) && search(dir);
}

function rssKb(pid: number): number | null {
  const m = readProc(pid, 'status')?.match(/^VmRSS:\s+(\d+)\s+kB/m);
  return m ? Number(m[1]) : null;
}

/** Samples VmRSS of the primary and its children every 500 ms; keeps each pid's peak. */
export class RssSampler {
  private readonly peaks = new Map<number, ProcessPeak>();
  private readonly timer: NodeJS.Timeout;
  readonly supported = existsSync('/proc/self/status');

  constructor(private readonly primaryPid: number) {
    this.sample();
    this.timer = setInterval(() => this.sample(), 500);
    this.timer.unref();
  }

  private sample(): void {
    if (!this.supported) return;
    const pids: Array<[number, ProcessPeak['role']]> = [
      [this.primaryPid, 'primary'],
      ...childrenOf(this.primaryPid).map((p) => [p, 'worker'] as [number, ProcessPeak['role']]),
    ];
    for (const [pid, role] of pids) {
      const kb = rssKb(pid);
      if (kb === null) continue;
      const mb = kb / 1024;
      const seen = this.peaks.get(pid);
      if (!seen || mb > seen.peakRssMb) this.peaks.set(pid, { pid, role, peakRssMb: mb });
    }
  }

  stop(): ProcessPeak[] {
    this.sample();
    clearInterval(this.timer);
    return [...this.peaks.values()].sort((a, b) => (a.role === b.role ? a.pid - b.pid : a.role === 'primary' ? -1 : 1));
  }
}
