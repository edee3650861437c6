// One nemesis run from start to report: the world up, the sale created, buyers and the operator and
// the shop at work while the faults drawn from the seed are played; then everything healed, the
// service's answer and the sell-out timed, a quiet period for the event stream and the webhook to
// catch up, PostgreSQL read, the world taken down, and the history checked.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { check, CheckReport, Liveness } from './checker';
import { Client, Node } from './client';
import { Effects, FaultKind, play, Played, schedule, Shape, WORLD_KINDS } from './faults';
import { History } from './history';
import { lockCounts, LockCounts, lockLines } from './logs';
import { namespacesAllowed } from './network';
import { Rng } from './rng';
import { fakeTimeAvailable } from './services';
import { EventFollower, WebhookReceiver } from './shop';
import { takeSnapshot } from './snapshot';
import { SaleShape, Workload } from './workload';
import { allHealthy, healthy, LinkMode, QuorumRedis, World } from './world';
import { ClusterRedis } from './cluster';

export interface RunOptions {
  seed: number;
  /** How long the faults are played, in ms. */
  lengthMs: number;
  world: 'quorum' | 'cluster';
  links: 'auto' | LinkMode;
  /** The folder of the build the services run (the project, or a planted copy). */
  root: string;
  plant?: string;
  out: string;
  kinds?: FaultKind[];
  buyers: number;
  sellOutMs: number;
  log: (line: string) => void;
}

export interface RunResult {
  options: Omit<RunOptions, 'log'>;
  mode: LinkMode;
  /** The bridge and namespaces the run made (all removed at its end). */
  network: { bridge: string; namespaces: string[] } | null;
  fakeTime: boolean;
  kinds: FaultKind[];
  /** Kinds asked for that this machine cannot play, with why. */
  skipped: Array<{ kind: FaultKind; why: string }>;
  played: Played[];
  check: CheckReport;
  lock: LockCounts;
  liveness: Liveness;
  operations: Record<string, Record<string, number>>;
  codes: Record<string, number>;
  durationMs: number;
}

const LOCK_TTL_MS = 1000;
const LIVENESS_BOUND_MS = 10_000;

/** What a world gives the run, whichever it is. */
export interface RunWorld {
  nodes(): Node[];
  shape(lockTtlMs: number): Shape;
  effects(): Effects;
  healAll(): Promise<void>;
  /** Each service's log file, by service name. */
  logFiles(): Record<string, string>;
  pgUrl(): string;
  stop(): Promise<void>;
  made(): { bridge: string; namespaces: string[] } | null;
  /** Synchronous: for a signal, or a death without stop(). */
  emergencyStop(): void;
}

export async function runNemesis(o: RunOptions): Promise<RunResult> {
  const began = Date.now();
  mkdirSync(o.out, { recursive: true });
  const rng = new Rng(o.seed);
  const netns = namespacesAllowed();
  const mode: LinkMode = o.links === 'auto' ? (netns.ok ? 'netns' : 'proxy') : o.links;
  if (mode === 'netns' && !netns.ok) throw new Error(`network namespaces are not allowed here: ${netns.why}`);
  if (mode === 'proxy' && o.links === 'auto' && !netns.ok)
    o.log(`links: per-link proxies (no namespaces: ${netns.why})`);
  const fakeTime = fakeTimeAvailable();
  const skipped: RunResult['skipped'] = [];
  let kinds = o.kinds ?? [...WORLD_KINDS[o.world]];
  if (!fakeTime && kinds.includes('clock')) {
    skipped.push({ kind: 'clock', why: 'libfaketime is not installed (apt-get install faketime)' });
    kinds = kinds.filter((k) => k !== 'clock');
  }
  if (o.world === 'cluster' && mode !== 'netns') {
    for (const k of ['cluster-failover', 'partition-redis'] as FaultKind[])
      if (kinds.includes(k)) skipped.push({ kind: k, why: 'needs network namespaces' });
    kinds = kinds.filter((k) => k !== 'cluster-failover' && k !== 'partition-redis');
  }

  const history = new History(join(o.out, 'history.jsonl'));
  const client = new Client(history);
  const tokens = { admin: `nemesis-admin-${o.seed}-0123456789`, shop: `nemesis-shop-${o.seed}-0123456789` };
  const secret = `nemesis-webhook-secret-${o.seed}-0123456789abcdef`;
  let receiver: WebhookReceiver | undefined;
  const env = {
    ADMIN_TOKEN: tokens.admin,
    SHOP_TOKEN: tokens.shop,
    LOCK_TTL_MS: String(LOCK_TTL_MS),
    EXPIRY_SWEEP_MS: '500',
    RATE_LIMIT_USER: '0',
    RATE_LIMIT_IP: '0',
    MAX_CONNECTIONS_PER_IP: '0',
    DB_POOL_SIZE: '10',
    WEBHOOK_MAX_ATTEMPTS: '100',
    WEBHOOK_BACKOFF_MS: '200',
    WEBHOOK_TIMEOUT_MS: '3000',
    LOG_LEVEL: 'warn',
  };
  const webhook = {
    secret,
    start: async (host: string) => {
      receiver = await WebhookReceiver.start(host, secret, rng.fork('webhook'), join(o.out, 'webhooks.jsonl'));
      return receiver.url;
    },
  };
  o.log(
    `world: ${o.world}, links: ${mode}, clocks: ${fakeTime ? 'libfaketime' : 'real'}${o.plant ? `, planted bug: ${o.plant}` : ''}`,
  );
  const world: RunWorld = await World.start(
    { dir: join(o.out, 'world'), mode, root: o.root, fakeTime, services: 3, env, webhook },
    o.world === 'cluster' ? new ClusterRedis() : new QuorumRedis(),
    o.log,
  );
  const network = world.made();
  // Ctrl-C or a kill: nothing of the world may stay behind (processes, namespaces, the bridge).
  const killOnExit = () => world.emergencyStop();
  const onSignal = (signal: NodeJS.Signals) => {
    o.log(`${signal}: stopping the world`);
    world.emergencyStop();
    process.exit(130);
  };
  process.on('exit', killOnExit);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const follower = new EventFollower(() => world.nodes(), tokens.shop, rng.fork('shop'), join(o.out, 'events.jsonl'));
  try {
    const shape = saleShape(o);
    const workload = new Workload(client, () => world.nodes(), tokens, rng.fork('workload'), shape);
    await workload.setup();
    const faults = schedule(rng.fork('faults'), kinds, world.shape(LOCK_TTL_MS), o.lengthMs);
    history.note('schedule', { faults: faults.length, kinds, mode, fakeTime });
    writeFileSync(join(o.out, 'schedule.json'), JSON.stringify(faults, null, 1));
    o.log(`playing ${faults.length} faults over ${Math.round(o.lengthMs / 1000)} s (seed ${o.seed})`);
    follower.start();
    workload.start();
    history.note('faults begin');
    const played = await play(faults, world.effects(), history);
    history.note('faults end');
    await workload.stop();
    await world.healAll();
    const healedAt = Date.now();
    history.note('healed');
    o.log('healed; timing the answer and the sell-out');
    const healthyAfterMs: Record<string, number | null> = {};
    await Promise.all(
      world.nodes().map(async (n) => {
        const ok = await allHealthy([n], healedAt + 60_000);
        healthyAfterMs[n.name] = ok ? Date.now() - healedAt : null;
      }),
    );
    await workload.resume(rng.fork('closing'));
    const soldOutAt = Date.now();
    const soldOut = await workload.sellOut(6, () => unsold(world.pgUrl()), Date.now() + o.sellOutMs);
    const liveness: Liveness = {
      healthyAfterMs,
      boundMs: LIVENESS_BOUND_MS,
      soldOut,
      soldOutMs: soldOut ? Date.now() - soldOutAt : null,
    };
    history.note('sell-out', { soldOut, ms: liveness.soldOutMs });
    o.log(soldOut ? `sold out in ${Math.round((liveness.soldOutMs ?? 0) / 1000)} s` : 'did NOT sell out');
    // The webhook's backoff after a run of failures doubles up to a minute: time to try again.
    await quiet(world.pgUrl(), follower, 120_000);
    const snapshot = await takeSnapshot(world.pgUrl());
    writeFileSync(join(o.out, 'snapshot.json'), JSON.stringify(snapshot));
    await follower.stop();
    history.note('snapshot');
    const lock = lockCounts(
      lockLines(world.logFiles()),
      played.map((p) => ({
        kind: p.fault.kind,
        target: p.fault.target,
        startedAt: p.startedAt,
        endedAt: p.endedAt ?? p.startedAt,
      })),
    );
    await history.close();
    const report = check({
      entries: history.entries,
      snapshot,
      followed: follower.events,
      deliveries: receiver?.deliveries ?? [],
      liveness,
    });
    return {
      options: { ...o, log: undefined } as unknown as RunResult['options'],
      mode,
      network,
      fakeTime,
      kinds,
      skipped,
      played,
      check: report,
      lock,
      liveness,
      ...tally(history),
      durationMs: Date.now() - began,
    };
  } finally {
    await follower.stop().catch(() => undefined);
    client.close();
    await world.stop().catch(() => undefined);
    await receiver?.close().catch(() => undefined);
    process.removeListener('exit', killOnExit);
    process.removeListener('SIGINT', onSignal);
    process.removeListener('SIGTERM', onSignal);
  }
}

/** A small sale for a short run, a larger one for a long run; restocks keep it going meanwhile. */
function saleShape(o: RunOptions): SaleShape {
  const scale = Math.max(1, Math.min(6, Math.round(o.lengthMs / 120_000)));
  return {
    buyers: o.buyers,
    users: 150 * scale,
    paymentTimeoutS: 5,
    products: [
      { name: 'nemesis sale', stock: 40 * scale, segments: 8, waitingRoom: false, limitPerUser: 2 },
      { name: 'nemesis queue', stock: 25 * scale, segments: 4, waitingRoom: true, limitPerUser: 1 },
    ],
  };
}

/** Products with units left or reserved. */
async function unsold(url: string): Promise<number[]> {
  const { Client: Pg } = await import('pg');
  const db = new Pg({ connectionString: url });
  await db.connect();
  try {
    const { rows } = await db.query<{ id: number }>(
      `SELECT p.id FROM products p
        WHERE (SELECT coalesce(sum(stock), 0) FROM stock_segments s WHERE s.product_id = p.id) > 0
           OR EXISTS (SELECT 1 FROM orders o WHERE o.product_id = p.id AND o.status = 'reserved')`,
    );
    return rows.map((r) => r.id);
  } finally {
    await db.end();
  }
}

/** Waits (up to `ms`) until the webhook's mark and the SSE follower have reached the newest event. */
async function quiet(url: string, follower: EventFollower, ms: number): Promise<void> {
  const { Client: Pg } = await import('pg');
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const db = new Pg({ connectionString: url });
    try {
      await db.connect();
      const { rows } = await db.query<{ newest: string | null; mark: string | null }>(
        `SELECT (SELECT tx::text || '-' || id::text FROM order_events ORDER BY tx DESC, id DESC LIMIT 1) AS newest,
                (SELECT tx::text || '-' || id::text FROM event_marks WHERE name = 'webhook') AS mark`,
      );
      const { newest, mark } = rows[0];
      if (newest === null || (mark === newest && follower.lastCursor === newest)) return;
    } catch {
      /* asked again */
    } finally {
      await db.end().catch(() => undefined);
    }
    await sleep(500);
  }
}

function tally(history: History): Pick<RunResult, 'operations' | 'codes'> {
  const operations: Record<string, Record<string, number>> = {};
  const codes: Record<string, number> = {};
  for (const e of history.entries) {
    if (e.type !== 'complete') continue;
    const row = (operations[e.f] ??= {});
    row[e.outcome] = (row[e.outcome] ?? 0) + 1;
    if (e.outcome !== 'ok') {
      const k = `${e.f} ${e.status || e.error} ${e.code ?? ''}`.trim();
      codes[k] = (codes[k] ?? 0) + 1;
    }
  }
  return { operations, codes };
}

export { healthy };
