// Starts the built service (node dist/src/main.js, WORKERS processes on one port) for one
// benchmark configuration, and samples the resident memory of its primary and worker processes.
import { ChildProcess, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { freePort } from '../src/infrastructure/free-port';

export interface ServiceEnv {
  databaseUrl: string;
  redisUrl: string;
  adminToken: string;
  workers: number;
  stockLocking: 'redlock' | 'database';
  holdMs: number;
  lockTtlMs: number;
  lockWaitMs: number;
  lockRetryDelayMs: number;
  lockRetryJitterMs: number;
}

export interface RunningService {
  url: string;
  pid: number;
  child: ChildProcess;
  output(): string;
  stop(): Promise<void>;
}

export async function startService(root: string, env: ServiceEnv, signal?: AbortSignal): Promise<RunningService> {
  const main = join(root, 'dist', 'src', 'main.js');
  if (!existsSync(main)) throw new Error(`${main} is missing: build first (npm run bench builds; or npx nest build)`);
  const port = await freePort();
  let out = '';
  // The same heap bound as `npm start` (package.json), so memory is measured as users run it.
  const child = spawn(process.execPath, ['--max-old-space-size=128', main], {
    cwd: root,
    // Only what the service needs: an inherited DATABASE_URL etc. must not leak past the bench's choice.
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      NODE_ENV: 'production',
      HOST: '127.0.0.1',
      PORT: String(port),
      DATABASE_URL: env.databaseUrl,
      REDIS_URL: env.redisUrl,
      ADMIN_TOKEN: env.adminToken,
      WORKERS: String(env.workers),
      STOCK_LOCKING: env.stockLocking,
      ORDER_HOLD_MS: String(env.holdMs),
      LOCK_TTL_MS: String(env.lockTtlMs),
      LOCK_WAIT_MS: String(env.lockWaitMs),
      // The no-lock peer waits inside PostgreSQL (row lock, pool), bounded by DB_TIMEOUT_MS: give
      // it the same bound as the Redis lock wait, or its single-row baseline times out first.
      DB_TIMEOUT_MS: String(env.lockWaitMs),
      LOCK_RETRY_DELAY_MS: String(env.lockRetryDelayMs),
      LOCK_RETRY_JITTER_MS: String(env.lockRetryJitterMs),
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (c: Buffer) => (out = (out + c.toString()).slice(-100_000)));
  child.stderr?.on('data', (c: Buffer) => (out = (out + c.toString()).slice(-100_000)));
  const stop = () => stopProcess(child);
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 90_000;
  try {
    for (;;) {
      if (signal?.aborted) throw new Error('aborted');
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`service exited (${child.exitCode ?? child.signalCode}) before serving:\n${out}`);
      if (await live(url)) break;
      if (Date.now() > deadline) throw new Error(`service did not serve within 90 s:\n${out}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    // /health/live answers as soon as one worker listens; wait until every worker has.
    if (env.workers > 1) await untilWorkers(child.pid!, env.workers, 30_000);
  } catch (err) {
    await stop();
    throw err;
  }
  return { url, pid: child.pid!, child, output: () => out, stop };
}

function live(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = http.get(`${url}/health/live`, { agent: false, timeout: 1000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
  });
}

async function untilWorkers(pid: number, workers: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (childrenOf(pid).length < workers && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  // A forked worker still boots Nest for a moment after it exists.
  await new Promise((r) => setTimeout(r, 1500));
}

/** SIGTERM (the service stops its workers itself), SIGKILL for the whole group after 20 s. */
export function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kids = child.pid ? childrenOf(child.pid) : [];
    const kill = setTimeout(() => {
      child.kill('SIGKILL');
      for (const k of kids) {
        try {
          process.kill(k, 'SIGKILL');
        } catch {
          /* already gone */
        }
      }
    }, 20_000);
    child.once('exit', () => {
      clearTimeout(kill);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

/** Pids whose parent is `pid`, from /proc/<pid>/stat (Linux); [] elsewhere. */
export function childrenOf(pid: number): number[] {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  const kids: number[] = [];
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      // The command name may hold spaces and parentheses; the fields after the last ')' do not.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === pid) kids.push(Number(e));
    } catch {
      /* the process ended while we looked */
    }
  }
  return kids;
}

function rssKb(pid: number): number | null {
  try {
    const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+)\s+kB/m);
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

export interface ProcessPeak {
  pid: number;
  role: 'primary' | 'worker';
  peakRssMb: number;
}

/** Samples VmRSS of the primary and its children every `intervalMs`; keeps each pid's peak. */
export class RssSampler {
  private readonly peaks = new Map<number, ProcessPeak>();
  private readonly timer: NodeJS.Timeout;
  readonly supported = existsSync('/proc/self/status');

  constructor(
    private readonly primaryPid: number,
    intervalMs = 500,
  ) {
    this.sample();
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.timer.unref();
  }

  private sample(): void {
    if (!this.supported) return;
    const pids: Array<[number, ProcessPeak['role']]> = [[this.primaryPid, 'primary'], ...childrenOf(this.primaryPid).map((p) => [p, 'worker'] as [number, ProcessPeak['role']])];
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
