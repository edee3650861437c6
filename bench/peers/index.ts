// Starts a benchmark peer (bare, bare-lua) as a child process, the way the benchmark starts the
// service: `node dist/bench/peers/<kind>.js`, settings through the environment, ready once
// GET /health/live answers 200. Also exports the bare-lua peer's audit and a product insert.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { live } from '../../harness/launcher';
import { join } from 'node:path';
import { stopChild } from '../../src/infrastructure/embedded-redis';
import { freePort } from '../../src/infrastructure/free-port';
import { projectRoot } from '../../src/infrastructure/project-root';
import type { LockSettings } from '../service';

export { auditLuaPeer, luaPeerAuditProblems } from './audit';
export type { LuaPeerAudit } from './audit';
export { insertProduct } from './products';

export type PeerKind = 'bare' | 'bare-lua';

/** The lock settings are the bare peer's only, as the service's LOCK_* (default 2000, 5000, 4, 8). */
export interface PeerEnv extends Partial<LockSettings> {
  databaseUrl: string;
  redisUrl: string;
  /** bare only: 'database' drops the Redis user and segment locks (PostgreSQL row locks only). Default 'redlock'. */
  locking?: 'redlock' | 'database';
  /** ORDER_HOLD_MS: bare sleeps it inside the segment lock (or the row lock), bare-lua before its INSERT. Default 0. */
  holdMs?: number;
}

/** A started peer: its URL and pid, the last 100 kB of its output, and stop() (SIGTERM, then SIGKILL after 10 s). */
export type RunningPeer = Awaited<ReturnType<typeof startPeer>>;

export async function startPeer(kind: PeerKind, env: PeerEnv, signal?: AbortSignal) {
  const root = projectRoot(__dirname);
  const main = join(root, 'dist', 'bench', 'peers', `${kind}.js`);
  if (!existsSync(main)) throw new Error(`${main} is missing: build first (npx nest build)`);
  const port = await freePort();
  const settings: Record<string, number | string | undefined> = {
    PORT: port,
    DATABASE_URL: env.databaseUrl,
    REDIS_URL: env.redisUrl,
    STOCK_LOCKING: env.locking,
    ORDER_HOLD_MS: env.holdMs,
    LOCK_TTL_MS: env.lockTtlMs,
    LOCK_WAIT_MS: env.lockWaitMs,
    LOCK_RETRY_DELAY_MS: env.lockRetryDelayMs,
    LOCK_RETRY_JITTER_MS: env.lockRetryJitterMs,
  };
  const childEnv: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    NODE_ENV: 'production',
    HOST: '127.0.0.1',
  };
  for (const [name, value] of Object.entries(settings)) if (value !== undefined) childEnv[name] = String(value);
  // The same heap bound as the service, so their memory compares.
  const child = spawn(process.execPath, ['--max-old-space-size=128', '--max-semi-space-size=8', main], {
    cwd: root,
    env: childEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const keep = (c: Buffer) => (out = (out + c.toString()).slice(-100_000));
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const url = `http://127.0.0.1:${port}`;
  const stop = () => stopChild(child, 'SIGTERM', 10_000);
  const deadline = Date.now() + 30_000;
  try {
    while (!(await live(url))) {
      if (signal?.aborted) throw new Error('aborted');
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(`peer ${kind} exited (${child.exitCode ?? child.signalCode}) before serving:\n${out}`);
      if (Date.now() > deadline) throw new Error(`peer ${kind} did not serve within 30 s:\n${out}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { kind, url, pid: child.pid!, output: () => out, stop };
}
