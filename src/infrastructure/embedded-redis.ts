// Starts a private redis-server from PATH on a free loopback port, for users without REDIS_URL.
import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import { onFreePort } from './free-port';
import { EmbeddedServerError, PortTakenError } from './postgres-placement';

const INSTALL =
  'install one (Debian/Ubuntu: `sudo apt-get install redis-server`; macOS: `brew install redis`), ' +
  'point REDIS_URL at a running Redis, or run the whole stack with `docker compose up`';

export class RedisServerMissingError extends EmbeddedServerError {
  constructor() {
    super(`REDIS_URL is unset and no redis-server is on PATH: ${INSTALL}`);
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
  return onFreePort(opts.port, (port) => startOn(port, opts.extraArgs ?? []));
}

async function startOn(port: number, extraArgs: string[]): Promise<EmbeddedRedis> {
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extraArgs];
  // Its own process group: a terminal's Ctrl-C is for the service, which stops Redis after draining.
  const child = spawn('redis-server', args, { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  // Last resort when this process ends without stopping the server (an uncaught error, process.exit,
  // a signal during the start).
  const killOnExit = () => child.kill('SIGTERM');
  process.on('exit', killOnExit);
  child.once('exit', () => process.removeListener('exit', killOnExit));
  await new Promise<void>((resolve, reject) => {
    let out = '';
    const done = () => {
      clearTimeout(timer);
      child.removeListener('exit', onExit);
    };
    const timer = setTimeout(() => {
      done();
      child.kill('SIGKILL');
      reject(
        new EmbeddedServerError(
          `redis-server did not get ready on port ${port} within 30 s: ${out.trim().split('\n').slice(-3).join('\n')}`,
        ),
      );
    }, 30_000);
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('Ready to accept connections')) {
        done();
        resolve();
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    const onExit = (code: number | null) => {
      done();
      reject(explainRedisExit(port, code, out));
    };
    child.once('exit', onExit);
    // Stays attached: a settled promise ignores it, and an 'error' without a listener would throw.
    child.on('error', (err: NodeJS.ErrnoException) => {
      done();
      reject(
        err.code === 'ENOENT'
          ? new RedisServerMissingError()
          : new EmbeddedServerError(`could not run redis-server (${err.code ?? err.message}): ${INSTALL}`),
      );
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

export function explainRedisExit(port: number, code: number | null, output: string): EmbeddedServerError {
  if (/Address already in use/i.test(output))
    return new PortTakenError(
      `port ${port} is in use, so redis-server cannot listen there: free that port, or set REDIS_URL`,
    );
  return new EmbeddedServerError(
    `redis-server exited (code ${code}) before it was ready: ${output.trim().split('\n').slice(-3).join('\n')}\nSet REDIS_URL to a running Redis, or fix the cause above`,
  );
}

export function stopChild(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 5000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('exit', () => {
      clearTimeout(kill);
      resolve();
    });
    child.kill(signal);
  });
}
