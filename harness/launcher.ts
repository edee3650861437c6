// Harness (see harness/README.md): the one launcher of the built service, shared by the e2e tests
// (test/support/service.ts) and the benchmark (bench/service.ts, bench/door.ts), so that both start
// the service exactly as a user does and a fix to how it is started or stopped reaches both.
//
// Starts node dist/src/main.js as its own process with only the environment it is given, waits
// until every worker serves, and stops it (and its workers) on demand.
import { ChildProcess, spawn } from 'node:child_process';
import { appendFileSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { onFreePort } from '../src/infrastructure/free-port';
import { PortTakenError } from '../src/infrastructure/postgres-placement';
import { projectRoot } from '../src/infrastructure/project-root';

export interface LaunchOptions {
  /** The service's environment on top of PATH and HOME; nothing else is inherited, so a stray DATABASE_URL cannot leak in. */
  env: Record<string, string>;
  /** Listen here instead of on a free port. */
  port?: number;
  /** --max-old-space-size, as `npm start` sets it (with its young generation bound, --max-semi-space-size=8); unset = Node's defaults. */
  heapMb?: number;
  /** More Node / V8 flags, after the heap bound (the benchmark's --node-flags). */
  nodeFlags?: string[];
  /**
   * The address to listen on and to be reached at (HOST); default 127.0.0.1. The nemesis gives
   * each process an address of its own network namespace.
   */
  host?: string;
  /** A command that runs node, e.g. `ip netns exec <ns>` (the nemesis); it must exec node in its place, so that signals reach the service. */
  prefix?: string[];
  /** The folder whose dist/src/main.js is started (the nemesis starts a patched copy); default the project. */
  root?: string;
  /** Every line the service writes, appended here besides the kept tail (the nemesis counts lines of killed processes). */
  logFile?: string;
  /** How long the service may take to answer GET /health/live. */
  startTimeoutMs?: number;
  signal?: AbortSignal;
}

export interface ServiceProcess {
  url: string;
  port: number;
  pid: number;
  child: ChildProcess;
  /** The last 200 kB of stdout and stderr together. */
  output(): string;
  /** Sends `signal` (the service drains and stops its workers itself), SIGKILL to it and its workers after 20 s; resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** Sends `signal` to the primary and returns at once (SIGSTOP, SIGCONT; an exit after a SIGKILL sent here is expected, not reported). */
  signal(signal: NodeJS.Signals): void;
}

const OUTPUT_KEPT = 200_000;

/** The variables whose values must never show in a service's output (test/support/secret-leaks.ts). */
export const SECRET_ENV = ['ADMIN_TOKEN', 'SHOP_TOKEN', 'BUYER_JWT_SECRET', 'ADMISSION_SECRET', 'WEBHOOK_SECRET'];

/**
 * With FLASHSALE_LOG_DIR set (the e2e run sets it), a service's whole output is written there,
 * beside the secret values it was given, so that the run can check at its end that none was
 * printed (test/support/secret-leaks.ts). For services started here and by specs that spawn their own.
 */
export function keepServiceLog(child: ChildProcess, env: Record<string, string | undefined>): void {
  const dir = process.env.FLASHSALE_LOG_DIR;
  if (!dir || !child.pid) return;
  const secrets = SECRET_ENV.map((name) => env[name]).filter((v): v is string => !!v);
  writeFileSync(join(dir, `service-${child.pid}.secrets.json`), JSON.stringify(secrets));
  const file = join(dir, `service-${child.pid}.log`);
  writeFileSync(file, '');
  const append = (chunk: Buffer) => appendFileSync(file, chunk);
  child.stdout?.on('data', append);
  child.stderr?.on('data', append);
}

/** Services started here that have not exited yet (see stopServicesLeftRunning). */
const running = new Set<ServiceProcess>();

/**
 * Starts the service on `options.port`, or on a free port: one chosen here is chosen again when
 * another process took it before the service listened (onFreePort), since a free port is only free
 * when it is handed out.
 */
export function launchService(options: LaunchOptions): Promise<ServiceProcess> {
  const root = options.root ?? projectRoot(__dirname);
  const main = join(root, 'dist', 'src', 'main.js');
  if (!existsSync(main)) return Promise.reject(new Error(`${main} is missing: build first (npm run build)`));
  return onFreePort(options.port, (port) => launchOn(port, main, root, options));
}

/**
 * Stops every service started here that is still running and returns their ports: the e2e run calls
 * it after each spec file (test/support/after-each-file.ts), so that a spec that left one behind
 * fails and the next spec on its database does not meet a stranger's sweeps.
 */
export async function stopServicesLeftRunning(): Promise<number[]> {
  const left = [...running];
  await Promise.all(left.map((s) => s.stop('SIGKILL')));
  return left.map((s) => s.port);
}

async function launchOn(port: number, main: string, root: string, options: LaunchOptions): Promise<ServiceProcess> {
  const startTimeoutMs = options.startTimeoutMs ?? 60_000;
  const host = options.host ?? '127.0.0.1';
  const env: Record<string, string | undefined> = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    HOST: host,
    LOG_LEVEL: 'warn',
    // A benchmark's load and a spec's clients all come from this one address: the per-address
    // connection cap would measure itself. test/connections.e2e-spec.ts sets it to test it.
    MAX_CONNECTIONS_PER_IP: '0',
    ...options.env,
    PORT: String(port),
  };
  const heap = options.heapMb ? [`--max-old-space-size=${options.heapMb}`, '--max-semi-space-size=8'] : [];
  const flags = [...heap, ...(options.nodeFlags ?? [])];
  const [command, ...args] = [...(options.prefix ?? []), process.execPath, ...flags, main];
  const child = spawn(command, args, {
    cwd: root,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  keepServiceLog(child, env);
  if (options.logFile) {
    const file = options.logFile;
    const append = (chunk: Buffer) => appendFileSync(file, chunk);
    child.stdout?.on('data', append);
    child.stderr?.on('data', append);
  }
  let out = '';
  const keep = (c: Buffer) => (out = (out + c.toString()).slice(-OUTPUT_KEPT));
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  let stopping = false;
  let serving = false;
  // A service that dies while a spec or the benchmark still counts on it (a crash, a kill from
  // elsewhere) is said at once, with its last words: otherwise all that shows is ECONNREFUSED.
  child.once('exit', (code, signal) => {
    if (serving && !stopping)
      process.stderr.write(
        `\nservice pid ${child.pid} on port ${port} exited unasked (${code ?? signal}); its last output:\n${out.slice(-8000)}\n`,
      );
  });
  const service: ServiceProcess = {
    url: `http://${host}:${port}`,
    port,
    pid: child.pid ?? 0,
    child,
    output: () => out,
    stop: (signal = 'SIGTERM') => {
      stopping = true;
      return stopProcess(child, signal);
    },
    signal: (signal) => {
      if (signal === 'SIGKILL') stopping = true;
      child.kill(signal);
    },
  };
  running.add(service);
  child.once('exit', () => running.delete(service));
  const exited = () => child.exitCode !== null || child.signalCode !== null;
  try {
    const deadline = Date.now() + startTimeoutMs;
    while (!(await live(service.url))) {
      if (exited()) {
        const said = `service exited (${child.exitCode ?? child.signalCode}) before serving:\n${out}`;
        throw /EADDRINUSE/.test(out) ? new PortTakenError(said) : new Error(said);
      }
      if (Date.now() > deadline) throw new Error(`service did not serve within ${startTimeoutMs / 1000} s:\n${out}`);
      await sleep(100, undefined, { signal: options.signal });
    }
    // /health/live answers as soon as one worker listens; a cluster is ready when every worker is.
    const workers = Number(env.WORKERS ?? 1);
    if (workers > 1) {
      while (childrenOf(service.pid).length < workers && Date.now() < deadline)
        await sleep(100, undefined, { signal: options.signal });
      // A forked worker still boots Nest for a moment after it exists.
      await sleep(1500, undefined, { signal: options.signal });
    }
  } catch (err) {
    await service.stop();
    throw err;
  }
  serving = true;
  return service;
}

/** Whether the process at `url` answers GET /health/live with 200 (services and peers alike). */
export function live(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    // agent:false: no kept-alive socket to a process that may be about to exit.
    const req = http.get(`${url}/health/live`, { agent: false, timeout: 1000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
  });
}

function stopProcess(child: ChildProcess, signal: NodeJS.Signals): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => {
    // Taken now: once the primary is gone its workers are re-parented and no longer found.
    const workers = child.pid ? childrenOf(child.pid) : [];
    const killAll = () => {
      for (const pid of [child.pid, ...workers]) {
        try {
          if (pid) process.kill(pid, 'SIGKILL');
        } catch {
          /* already gone */
        }
      }
    };
    const kill = setTimeout(killAll, 20_000);
    child.once('exit', (code) => {
      clearTimeout(kill);
      resolve(code);
    });
    // A killed primary cannot stop its workers, so they go with it.
    if (signal === 'SIGKILL') killAll();
    else child.kill(signal);
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
