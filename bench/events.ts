// `npm run bench:events` (bench/README.md): what the order event outbox costs the order path; the
// same load with the outbox's triggers enabled and disabled, interleaved in rounds (on, off, then
// off, on, ...) so that a slow moment of this shared machine weighs on both.
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import { costDeltas, ScenarioCosts } from './costs';
import { LoadResult, mergeLatency, runLoad } from './load';
import { createProductViaApi } from './scenarios';
import { machine, reportMain, withServers } from './standalone';

// The outbox's triggers as the migrations leave them: product.sold_out is written at commit by
// product_sold_out_at_commit (migrations/1764300000000-SoldOutAfterCause.ts), which replaced
// product_events_on_segments; with the old name this benchmark stopped at its first round.
const TRIGGERS = [
  ['orders', 'order_events_on_insert'],
  ['orders', 'order_events_on_update'],
  ['stock_segments', 'product_sold_out_at_commit'],
] as const;

export type Mode = 'events' | 'no-events';

/** One mode's load in one round; `orders` and `events`: the orders and order.reserved events PostgreSQL holds. */
function partOf(mode: Mode, round: number, r: LoadResult, costs: ScenarioCosts, orders: number, events: number) {
  return {
    mode,
    round,
    orders: r.created,
    elapsedS: r.elapsedS,
    perSec: r.created / r.elapsedS,
    latencyMs: r.latency201,
    statusCounts: r.statusCounts,
    costs,
    /** order.reserved events written for this part's orders (scaled to the orders answered). */
    events: r.created * (orders === 0 ? 0 : events / orders),
  };
}
export type EventsPart = ReturnType<typeof partOf>;

/** The parts of one mode added up: orders and time add up, costs per order weighted by orders. */
export function summarise(parts: EventsPart[], mode: Mode) {
  const mine = parts.filter((p) => p.mode === mode);
  const orders = mine.reduce((n, p) => n + p.orders, 0);
  const elapsedS = mine.reduce((n, p) => n + p.elapsedS, 0);
  const weighted = (get: (p: EventsPart) => number | null): number | null => {
    if (mine.some((p) => get(p) === null) || orders === 0) return null;
    return mine.reduce((n, p) => n + (get(p) as number) * p.orders, 0) / orders;
  };
  const latency = mergeLatency(mine.map((p) => p.latencyMs));
  return {
    mode,
    orders,
    elapsedS,
    perSec: elapsedS > 0 ? orders / elapsedS : 0,
    p50Ms: latency?.p50 ?? null,
    p99Ms: latency?.p99 ?? null,
    pgCpuUsPerOrder: weighted((p) => p.costs.perUnit.pgCpuUs),
    pgWalBytesPerOrder: weighted((p) => p.costs.perUnit.pgWalBytes) ?? 0,
    serviceCpuUsPerOrder: weighted((p) => p.costs.perUnit.targetCpuUs),
    eventsPerOrder: orders === 0 ? 0 : mine.reduce((n, p) => n + p.events, 0) / orders,
  };
}

const fmt = (n: number | null, digits = 0) => (n === null ? 'n/a' : n.toFixed(digits));

export function renderEvents(r: EventsReport): string {
  return [
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
  ].join('\n');
}

async function setTriggers(db: Client, on: boolean): Promise<void> {
  for (const [table, trigger] of TRIGGERS)
    await db.query(`ALTER TABLE ${table} ${on ? 'ENABLE' : 'DISABLE'} TRIGGER ${trigger}`);
}

const log = (line: string) => process.stderr.write(`${line}\n`);

/** The outbox's triggers enabled and disabled in turn: `duration` seconds of load in all, over `rounds` rounds. */
async function runEvents(flags: Partial<Record<'duration' | 'rounds' | 'connections', string>>) {
  const durationS = Number(flags.duration ?? 40);
  const rounds = Number(flags.rounds ?? 4);
  const connections = Number(flags.connections ?? 100);
  const segments = 20;
  const startedAt = new Date().toISOString();
  return withServers('events', log, async ({ db, probe, adminToken, start }) => {
    const svc = await start();
    const productId = await createProductViaApi(svc.url, adminToken, {
      name: 'events bench',
      stock: 50_000_000,
      segments,
    });
    const load = { url: svc.url, productId, connections, timeoutS: 30 };
    // Unmeasured: the order path compiled by the JIT, both ways.
    for (const on of [true, false]) {
      await setTriggers(db, on);
      await runLoad({ ...load, userPrefix: `warm-${on}-`, durationS: 2, label: 'warm-up' });
    }
    const parts: EventsPart[] = [];
    const partS = durationS / rounds / 2;
    for (let round = 1; round <= rounds; round++) {
      const order: Mode[] = round % 2 === 1 ? ['events', 'no-events'] : ['no-events', 'events'];
      for (const mode of order) {
        await setTriggers(db, mode === 'events');
        const prefix = `r${round}-${mode}-`;
        const before = await probe.snapshot(svc.pid);
        const what = `${mode} round ${round}`;
        const result = await runLoad({ ...load, userPrefix: prefix, durationS: partS, label: what, progress: log });
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
          throw new Error(`${what}: ${result.created} orders answered 201, ${orders} in PostgreSQL`);
        if (events !== (mode === 'events' ? orders : 0))
          throw new Error(`${what}: ${orders} orders, ${events} order.reserved events`);
        const part = partOf(mode, round, result, costDeltas(before, after, 'order', orders), orders, events);
        parts.push(part);
        log(`${what}: ${part.perSec.toFixed(0)} orders/s`);
      }
    }
    await setTriggers(db, true);
    const rows = [summarise(parts, 'events'), summarise(parts, 'no-events')];
    return {
      startedAt,
      machine: { ...machine(), node: process.version },
      durationS,
      rounds,
      connections,
      segments,
      parts,
      rows,
      ratio: rows[0].perSec / rows[1].perSec,
      target: 0.9,
    };
  });
}

export type EventsReport = Awaited<ReturnType<typeof runEvents>>;

if (require.main === module)
  reportMain(
    'events',
    [
      ['duration', 'rounds', 'connections'],
      'npm run bench:events -- [--duration S (40: load seconds in all)] [--rounds N (4)] [--connections N (100)] [--out DIR (bench/results)]',
    ],
    runEvents,
    renderEvents,
  );
