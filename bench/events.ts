// `npm run bench:events`: what the order event outbox costs the order path, measured in one run on
// this machine. One service process, one product of ample stock in 20 segments, POST /orders from
// distinct buyers at a fixed concurrency; the same load with the outbox's triggers enabled (every
// order writes its order.reserved event in its own statement's transaction, as in production) and
// disabled (ALTER TABLE ... DISABLE TRIGGER: the order path of before the outbox), interleaved in
// rounds (on, off, then off, on, ...) so that a slow moment of this shared machine weighs on both.
// Checks that every order made with the triggers on has its event and none made with them off has
// one. Writes events.md and events.json beside latest.md.
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Client } from 'pg';
import { launchService } from '../harness/launcher';
import { costDeltas, ScenarioCosts, startBenchServers } from './costs';
import { Latency, runLoad } from './load';
import { createProductViaApi } from './scenarios';
import { BENCH_SHOP_TOKEN } from './service';

const ADMIN_TOKEN = 'bench-events-admin-token-0123456789';
const HEAP_MB = 128;
const TRIGGERS = [
  ['orders', 'order_events_on_insert'],
  ['orders', 'order_events_on_update'],
  ['stock_segments', 'product_events_on_segments'],
] as const;

export type Mode = 'events' | 'no-events';

export interface EventsPart {
  mode: Mode;
  round: number;
  orders: number;
  elapsedS: number;
  perSec: number;
  latencyMs: Latency | null;
  statusCounts: Record<string, number>;
  costs: ScenarioCosts;
  /** order.reserved events written for this part's orders (scaled to the orders answered). */
  events: number;
}

export interface EventsRow {
  mode: Mode;
  orders: number;
  elapsedS: number;
  perSec: number;
  p50Ms: number | null;
  p99Ms: number | null;
  pgCpuUsPerOrder: number | null;
  pgWalBytesPerOrder: number;
  serviceCpuUsPerOrder: number | null;
  eventsPerOrder: number;
}

export interface EventsReport {
  startedAt: string;
  machine: { cores: number; memoryGb: number; node: string };
  durationS: number;
  rounds: number;
  connections: number;
  segments: number;
  parts: EventsPart[];
  rows: EventsRow[];
  ratio: number;
  target: number;
}

/** The parts of one mode added up: orders and time add up, costs per order weighted by orders. */
export function summarise(parts: EventsPart[], mode: Mode): EventsRow {
  const mine = parts.filter((p) => p.mode === mode);
  const orders = mine.reduce((n, p) => n + p.orders, 0);
  const elapsedS = mine.reduce((n, p) => n + p.elapsedS, 0);
  const weighted = (get: (p: EventsPart) => number | null): number | null => {
    if (mine.some((p) => get(p) === null) || orders === 0) return null;
    return mine.reduce((n, p) => n + (get(p) as number) * p.orders, 0) / orders;
  };
  const latencies = mine.map((p) => p.latencyMs).filter((l): l is Latency => l !== null);
  return {
    mode,
    orders,
    elapsedS,
    perSec: elapsedS > 0 ? orders / elapsedS : 0,
    p50Ms: latencies.length === 0 ? null : latencies.reduce((n, l) => n + l.p50, 0) / latencies.length,
    p99Ms: latencies.length === 0 ? null : Math.max(...latencies.map((l) => l.p99)),
    pgCpuUsPerOrder: weighted((p) => p.costs.perUnit.pgCpuUs),
    pgWalBytesPerOrder: weighted((p) => p.costs.perUnit.pgWalBytes) ?? 0,
    serviceCpuUsPerOrder: weighted((p) => p.costs.perUnit.targetCpuUs),
    eventsPerOrder: orders === 0 ? 0 : mine.reduce((n, p) => n + p.events, 0) / orders,
  };
}

const fmt = (n: number | null, digits = 0) => (n === null ? 'n/a' : n.toFixed(digits));

export function renderEvents(r: EventsReport): string {
  const lines = [
    `# The order event outbox: orders/s with and without it`,
    '',
    `${r.startedAt}, ${r.machine.cores} cores, Node ${r.machine.node}. One service process, one product in ${r.segments} segments, ` +
      `POST /orders from distinct buyers at ${r.connections} connections; ${r.rounds} rounds of ${r.durationS / r.rounds / 2} s per mode, ` +
      `interleaved. Command: \`npm run bench:events -- --duration ${r.durationS} --rounds ${r.rounds}\`.`,
    '',
    '| | orders | orders/s | p50 ms | p99 ms | PostgreSQL CPU µs/order | WAL bytes/order | service CPU µs/order | events/order |',
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|',
    ...r.rows.map(
      (row) =>
        `| ${row.mode === 'events' ? 'with events (as shipped)' : 'without (triggers disabled)'} | ${row.orders} | ${fmt(row.perSec)} | ${fmt(row.p50Ms, 1)} | ${fmt(row.p99Ms, 1)} | ${fmt(row.pgCpuUsPerOrder)} | ${fmt(row.pgWalBytesPerOrder)} | ${fmt(row.serviceCpuUsPerOrder)} | ${row.eventsPerOrder.toFixed(2)} |`,
    ),
    '',
    `**Ratio with / without: ${r.ratio.toFixed(2)}x** (target >= ${r.target}x: ${r.ratio >= r.target ? 'met' : 'MISSED'}).`,
    '',
    'Per round:',
    '',
    '| round | mode | orders/s |',
    '|--:|---|--:|',
    ...r.parts.map((p) => `| ${p.round} | ${p.mode} | ${fmt(p.perSec)} |`),
    '',
  ];
  return lines.join('\n');
}

async function setTriggers(db: Client, on: boolean): Promise<void> {
  for (const [table, trigger] of TRIGGERS)
    await db.query(`ALTER TABLE ${table} ${on ? 'ENABLE' : 'DISABLE'} TRIGGER ${trigger}`);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      duration: { type: 'string' },
      rounds: { type: 'string' },
      connections: { type: 'string' },
      out: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(
      'npm run bench:events -- [--duration S (40: load seconds in all)] [--rounds N (4)] [--connections N (100)] [--out DIR (bench/results)]\n',
    );
    return;
  }
  const durationS = Number(values.duration ?? 40);
  const rounds = Number(values.rounds ?? 4);
  const connections = Number(values.connections ?? 100);
  const segments = 20;
  const outDir = values.out ?? join(__dirname, '..', '..', 'bench', 'results');
  const log = (line: string) => process.stderr.write(`${line}\n`);
  const startedAt = new Date().toISOString();
  const cleanups: Array<() => Promise<unknown>> = [];
  try {
    const { pg, redis, db, probe } = await startBenchServers('events', cleanups, log);
    const svc = await launchService({
      env: {
        DATABASE_URL: pg.url,
        REDIS_URL: redis.url,
        ADMIN_TOKEN,
        SHOP_TOKEN: BENCH_SHOP_TOKEN,
        RATE_LIMIT_USER: '0',
        RATE_LIMIT_IP: '0',
        LOG_LEVEL: 'warn',
      },
      heapMb: HEAP_MB,
    });
    cleanups.push(() => svc.stop());
    const productId = await createProductViaApi(svc.url, ADMIN_TOKEN, {
      name: 'events bench',
      stock: 50_000_000,
      segments,
    });
    // Unmeasured: the order path compiled by the JIT, both ways.
    for (const on of [true, false]) {
      await setTriggers(db, on);
      await runLoad({
        url: svc.url,
        productId,
        userPrefix: `warm-${on}-`,
        connections,
        durationS: 2,
        timeoutS: 30,
        label: 'warm-up',
      });
    }
    const parts: EventsPart[] = [];
    const partS = durationS / rounds / 2;
    for (let round = 1; round <= rounds; round++) {
      const order: Mode[] = round % 2 === 1 ? ['events', 'no-events'] : ['no-events', 'events'];
      for (const mode of order) {
        await setTriggers(db, mode === 'events');
        const prefix = `r${round}-${mode}-`;
        const before = await probe.snapshot(svc.pid);
        const result = await runLoad({
          url: svc.url,
          productId,
          userPrefix: prefix,
          connections,
          durationS: partS,
          timeoutS: 30,
          label: `${mode} round ${round}`,
          progress: log,
        });
        await sleep(200);
        const after = await probe.snapshot(svc.pid);
        const [{ orders, events }] = (
          await db.query<{ orders: number; events: number }>(
            `SELECT (SELECT count(*)::int FROM orders WHERE product_id = $1 AND user_id LIKE $2 || '%') AS orders,
                    (SELECT count(*)::int FROM order_events WHERE type = 'order.reserved' AND data->>'userId' LIKE $2 || '%') AS events`,
            [productId, prefix],
          )
        ).rows;
        // The requests in flight when the load stopped were sold but not counted by the load.
        if (orders < result.created || orders > result.created + connections)
          throw new Error(`${mode} round ${round}: ${result.created} orders answered 201, ${orders} in PostgreSQL`);
        if (events !== (mode === 'events' ? orders : 0))
          throw new Error(`${mode} round ${round}: ${orders} orders, ${events} order.reserved events`);
        parts.push({
          mode,
          round,
          orders: result.created,
          elapsedS: result.elapsedS,
          perSec: result.created / result.elapsedS,
          latencyMs: result.latency201,
          statusCounts: result.statusCounts,
          costs: costDeltas(before, after, 'order', orders),
          events: result.created * (orders === 0 ? 0 : events / orders),
        });
        log(`${mode} round ${round}: ${(result.created / result.elapsedS).toFixed(0)} orders/s`);
      }
    }
    await setTriggers(db, true);
    const rows = [summarise(parts, 'events'), summarise(parts, 'no-events')];
    const report: EventsReport = {
      startedAt,
      machine: { cores: os.cpus().length, memoryGb: Math.round(os.totalmem() / 2 ** 30), node: process.version },
      durationS,
      rounds,
      connections,
      segments,
      parts,
      rows,
      ratio: rows[0].perSec / rows[1].perSec,
      target: 0.9,
    };
    mkdirSync(outDir, { recursive: true });
    writeFileSync(join(outDir, 'events.json'), `${JSON.stringify(report, null, 2)}\n`);
    writeFileSync(join(outDir, 'events.md'), renderEvents(report));
    process.stdout.write(renderEvents(report));
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  }
}

if (require.main === module) {
  main().catch((err: Error) => {
    process.stderr.write(`${err.stack ?? err.message}\n`);
    process.exit(1);
  });
}
