// Starts a private redis-server from PATH on a free loopback port, for users without REDIS_URL.
import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import { freePort } from './free-port';

export class RedisServerMissingError extends Error {
  constructor() {
    super(
      'REDIS_URL is unset and no redis-server is on PATH. Install one ' +
        '(Debian/Ubuntu: `sudo apt-get install redis-server`; macOS: `brew install redis`), ' +
        'point REDIS_URL at a running Redis, or run the whole stack with `docker compose up`.',
    );
  }
}

export interface EmbeddedRedis {
  url: string;
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

export function redisServerOnPath(): boolean {
  return spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;
}

/** Starts redis-server without persistence; resolves once it accepts connections. */
export async function startEmbeddedRedis(opts: { port?: number; extraArgs?: string[] } = {}): Promise<EmbeddedRedis> {
  if (!redisServerOnPath()) throw new RedisServerMissingError();
  const port = opts.port ?? (await freePort());
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...(opts.extraArgs ?? [])];
  const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  await new Promise<void>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`redis-server did not start on port ${port}:\n${out}`)), 15_000);
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('Ready to accept connections')) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`redis-server exited with code ${code}:\n${out}`));
    });
  });
  child.stdout?.removeAllListeners('data');
  child.stderr?.removeAllListeners('data');
  child.stdout?.resume();
  child.stderr?.resume();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    process: child,
    stop: () => stopChild(child),
  };
}

export function stopChild(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => child.kill('SIGKILL'), 5000);
    child.once('exit', () => {
      clearTimeout(kill);
      resolve();
    });
    child.kill(signal);
  });
}
