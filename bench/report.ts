// Turns a benchmark run into what people read: the console table, latest.md (the machine and
// settings, issue 8's targets computed from this run, the service against the bare peers, group
// commit, the Redis setups, per-hold locking tables with ratios against the ideal, the sweep with
// its Mermaid charts, the sale, the sale with returns, memory, the costs per order and per refusal), plus
// latest.json with every figure for tooling (bench/scaling-model.ts reads it).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ScenarioCosts } from './costs';
import { BACKEND_CONCURRENCY, ReturnsFigures, Spread } from './returns';
import { BARE_HELD_MS, Group, Locking, PlanOptions, REDIS_SETUPS, RedisSetup, ScenarioResult, StockLocking, Target } from './scenarios';
import { ProcessPeak, SERVICE_HEAP_MB } from './service';

/** One process start: the service with one environment, or a peer. */
export interface ServiceRun {
  target: Target;
  locking: Locking;
  holdMs: number;
  workers: number;
  batchMax: number | null;
  /** EXPIRY_SWEEP_MS of the start; null/absent = the service's default. */
  expirySweepMs?: number | null;
  /** The Redis it ran on; absent = single. */
  redis?: RedisSetup;
  processes: ProcessPeak[];
  rssSupported: boolean;
}

export interface BenchmarkReport {
  startedAt: string;
  finishedAt: string;
  command: string;
  machine: { cores: number; cpuModel: string; memoryGb: number; os: string; node: string; postgres: string; redis: string };
  settings: PlanOptions & {
    quick: boolean;
    durationS: number;
    connections: number;
    workers: number;
    warmUpS: number;
    /** Whether the built service reads ORDER_BATCH_MAX at all (before it did, the group-commit rows measured ORDER_BATCH_MAX=1). */
    batchMaxRead: boolean;
    /** ORDER_HOLDS_MAX of every service start; null = the service's default. */
    holdsMax: number | null;
    /** Node / V8 flags of every service start beside the heap bound (absent in reports before them). */
    nodeFlags?: string[];
    lock: { ttlMs: number; waitMs: number; retryDelayMs: number; retryJitterMs: number };
    dependencies: { postgres: string; redis: string };
  };
  scenarios: ScenarioResult[];
  services: ServiceRun[];
  rssTargetMb: number;
  /** The Redis setups group's rows with their ratios to the one redis-server (absent when the group did not run). */
  redisSetups?: RedisSetupsSection;
}

/** Redis figures per order of one setup: summed over its servers, or of one of them. */
export interface RedisPerOrder {
  /** EVAL/EVALSHA calls: round trips. */
  redisScripts: number;
  /** Every command Redis counted, those run inside scripts included. */
  redisCommands: number;
  redisCpuUs: number;
}

export interface RedisSetupRow {
  setup: RedisSetup;
  id: string;
  batchMax: number | null;
  status: ScenarioResult['status'];
  ordersPerSec: number;
  p99Ms: number | null;
  /** Summed over every Redis server of the setup; null when the costs were not read. */
  perOrder: RedisPerOrder | null;
  /** Each server of the setup (a quorum's or a cluster's masters, in the setup's order); null for the one redis-server. */
  perServer: Array<RedisPerOrder & { server: string }> | null;
  /** This row / the one redis-server's row at the same ORDER_BATCH_MAX; null where either figure is missing. */
  vsSingle: { ordersPerSec: number | null; p99: number | null; redisScripts: number | null; redisCommands: number | null; redisCpuUs: number | null };
}

export interface RedisSetupsSection {
  /** How the run was started, to repeat it. */
  command: string;
  workers: number;
  segments: number;
  holdMs: number;
  rows: RedisSetupRow[];
}

const MODE_NAME: Record<StockLocking, string> = { redlock: 'Redlock segments', database: 'no-lock mode (PG row lock)' };

function rate(n: number): string {
  if (!Number.isFinite(n)) return '-';
  return n >= 100 ? n.toFixed(0) : n.toFixed(1);
}
function ms(n: number | undefined | null): string {
  if (n === undefined || n === null || !Number.isFinite(n)) return '-';
  return n >= 100 ? n.toFixed(0) : n.toFixed(1);
}
function ratio(a: number | undefined, b: number | undefined): string {
  if (a === undefined || b === undefined || !(b > 0) || !Number.isFinite(a)) return '-';
  return `${(a / b).toFixed(2)}x`;
}
/** `20 x 50` for an even split; the service spreads any remainder, so just the count otherwise. */
function layout(r: { segments: number; stock: number }): string {
  return r.stock % r.segments === 0 ? `${r.segments} x ${r.stock / r.segments}` : `${r.segments} segments, ${r.stock} units`;
}
function codes(r: ScenarioResult): string {
  return Object.entries(r.statusCounts)
    .sort(([a], [b]) => Number(a) - Number(b))
    .map(([c, n]) => `${c}:${n}`)
    .join(' ');
}
function fivexx(r: ScenarioResult): number {
  return Object.entries(r.statusCounts)
    .filter(([c]) => Number(c) >= 500)
    .reduce((s, [, n]) => s + n, 0);
}
function spreadMs(x: Spread | null): string {
  return x ? `${ms(x.p50)} / ${ms(x.p99)} / ${ms(x.max)} ms` : '-';
}
function seconds(n: number | null): string {
  return n === null || !Number.isFinite(n) ? '-' : `${(n / 1000).toFixed(2)} s`;
}
function countsText(c: Record<string, number>): string {
  return (
    Object.entries(c)
      .sort(([a], [b]) => Number(a) - Number(b))
      .map(([k, n]) => `${k === '0' ? 'no answer' : k}:${n}`)
      .join(' ') || '-'
  );
}
function returnsOf(report: BenchmarkReport): Array<ScenarioResult & { returns: ReturnsFigures }> {
  return report.scenarios.filter((r): r is ScenarioResult & { returns: ReturnsFigures } => r.kind === 'returns' && r.returns !== undefined);
}
/** What the sale with returns measures, for the report. */
const RETURNS_MEASURES =
  "How long returned units take to sell again. The sale sells out as above; the shop then pays most reservations at once, cancels some (POST /orders/:id/cancel) and leaves the others to expire past the product's short paymentTimeoutS, while new buyers (one request each, paying at once) ask from just before the first cancel until every returned unit is sold again.";

function statusWord(r: ScenarioResult): string {
  return r.status === 'ok' ? 'ok' : '**FAILED**';
}
/** A scenario of the locking comparison, the sweep or the sale: the service at --workers and --batch-max. */
function find(report: BenchmarkReport, locking: StockLocking, holdMs: number, segments: number): ScenarioResult | undefined {
  const s = report.settings;
  return report.scenarios.find(
    (r) =>
      r.kind === 'steady' &&
      r.target === 'service' &&
      (r.redis ?? 'single') === 'single' &&
      r.workers === s.workers &&
      r.batchMax === s.batchMax &&
      r.locking === locking &&
      r.holdMs === holdMs &&
      r.segments === segments,
  );
}
/** The service beside the peers and in the group-commit comparison (--speed-workers processes). */
export function findFast(
  report: BenchmarkReport,
  w: { locking?: StockLocking; holdMs?: number; segments?: number; batchMax: number | null },
): ScenarioResult | undefined {
  const s = report.settings;
  const { locking = 'redlock', holdMs = 0, segments = s.speedSegments, batchMax } = w;
  return report.scenarios.find(
    (r) =>
      r.kind === 'steady' &&
      r.target === 'service' &&
      (r.redis ?? 'single') === 'single' &&
      r.workers === s.speedWorkers &&
      r.batchMax === batchMax &&
      r.locking === locking &&
      r.holdMs === holdMs &&
      r.segments === segments,
  );
}
function findPeer(report: BenchmarkReport, target: 'bare' | 'bare-lua', locking: Locking, segments: number, holdMs = 0): ScenarioResult | undefined {
  return report.scenarios.find((r) => r.kind === 'steady' && r.target === target && r.locking === locking && r.holdMs === holdMs && r.segments === segments);
}
export function findHealth(report: BenchmarkReport): ScenarioResult | undefined {
  return report.scenarios.find((r) => r.kind === 'health');
}
/** The refusals of a sold-out product (at --speed-workers). */
export function findSoldOut(report: BenchmarkReport): ScenarioResult | undefined {
  return report.scenarios.find((r) => r.kind === 'soldout');
}
function inGroup(report: BenchmarkReport, g: Group): ScenarioResult[] {
  return report.scenarios.filter((r) => r.groups.includes(g));
}
/** ORDER_BATCH_MAX as run: a number, or the service's default when the run left it unset. */
function batchName(b: number | null): string {
  return b === null ? 'service default' : String(b);
}
/** The hold beside every figure: with group commit one hold serves many orders, so say per what it is spent. */
function holdName(h: number): string {
  return h === 0 ? '0' : `${h} ms, once per lock hold`;
}
function failed(report: BenchmarkReport): ScenarioResult[] {
  return report.scenarios.filter((s) => s.status !== 'ok');
}
function metricCell(r: ScenarioResult): { busy: string; fall: string; wait: string } {
  const m = r.metrics;
  // The no-lock mode takes no Redis lock, so its lock counters stay 0 by construction, not by merit; the bare peers have none.
  if (r.locking !== 'redlock' || r.target !== 'service') return { busy: 'n/a', fall: 'n/a', wait: 'n/a' };
  if (m.source === 'unavailable' || m.lockBusy === null) return { busy: '-', fall: '-', wait: '-' };
  const mark = m.source === 'partial' ? '*' : '';
  return {
    busy: `${m.lockBusy}${mark}`,
    fall: `${m.falloversBusy}/${m.falloversEmpty}${mark}`,
    wait: m.lockWaitCount ? `${m.lockWaitCount} x ${ms(m.lockWaitMeanMs)} ms${mark}` : `0${mark}`,
  };
}

/** One row of the service-against-peers table. */
interface SpeedRow {
  what: string;
  r: ScenarioResult | undefined;
  unit: 'orders/s' | 'req/s' | '410/s';
}

function speedRows(report: BenchmarkReport): SpeedRow[] {
  const s = report.settings;
  const n = s.speedSegments;
  const w = `${s.speedWorkers} process${s.speedWorkers === 1 ? '' : 'es'}`;
  const rows: SpeedRow[] = [
    { what: `service (${w}), Redlock segments, ORDER_BATCH_MAX=1`, r: findFast(report, { batchMax: 1 }), unit: 'orders/s' },
    {
      what: `service (${w}), Redlock segments, group commit (ORDER_BATCH_MAX ${batchName(s.batchMax)})`,
      r: findFast(report, { batchMax: s.batchMax }),
      unit: 'orders/s',
    },
    {
      what: `service (${w}), STOCK_LOCKING=database (no Redis lock), ORDER_BATCH_MAX=1`,
      r: findFast(report, { locking: 'database', batchMax: 1 }),
      unit: 'orders/s',
    },
    { what: `service (${w}), one lock (1 segment), ORDER_BATCH_MAX=1`, r: findFast(report, { segments: 1, batchMax: 1 }), unit: 'orders/s' },
    { what: `service (${w}), GET /health/live (no work at all)`, r: findHealth(report), unit: 'req/s' },
    { what: `service (${w}), sold-out product: refusals (410) to distinct buyers`, r: findSoldOut(report), unit: '410/s' },
    { what: 'bare peer, Redis segment locks', r: findPeer(report, 'bare', 'redlock', n), unit: 'orders/s' },
    { what: 'bare peer, no Redis lock (STOCK_LOCKING=database)', r: findPeer(report, 'bare', 'database', n), unit: 'orders/s' },
    { what: 'bare peer, one lock (1 segment)', r: findPeer(report, 'bare', 'redlock', 1), unit: 'orders/s' },
    { what: 'bare-lua peer: stock in Redis, one Lua script, one INSERT', r: findPeer(report, 'bare-lua', 'lua', n), unit: 'orders/s' },
    { what: `bare peer, one lock (1 segment), lock held ${BARE_HELD_MS} ms`, r: findPeer(report, 'bare', 'redlock', 1, BARE_HELD_MS), unit: 'orders/s' },
    { what: `bare peer, Redis segment locks, lock held ${BARE_HELD_MS} ms`, r: findPeer(report, 'bare', 'redlock', n, BARE_HELD_MS), unit: 'orders/s' },
  ];
  return rows.filter((x) => x.r !== undefined);
}

/** The service against each peer, as ratios of this run's figures. */
function speedRatios(report: BenchmarkReport): Array<{ what: string; value: string }> {
  const s = report.settings;
  const n = s.speedSegments;
  const one = findFast(report, { batchMax: 1 });
  const group = findFast(report, { batchMax: s.batchMax });
  const bare = findPeer(report, 'bare', 'redlock', n);
  const lua = findPeer(report, 'bare-lua', 'lua', n);
  const pairs: Array<[string, ScenarioResult | undefined, ScenarioResult | undefined]> = [
    ['service ORDER_BATCH_MAX=1 / bare peer (Redis segment locks)', one, bare],
    ['service group commit / bare peer (Redis segment locks)', group, bare],
    ['service ORDER_BATCH_MAX=1 / bare-lua peer', one, lua],
    ['service group commit / bare-lua peer', group, lua],
    [
      'service STOCK_LOCKING=database / bare peer without Redis lock',
      findFast(report, { locking: 'database', batchMax: 1 }),
      findPeer(report, 'bare', 'database', n),
    ],
    ['service one lock / bare peer one lock', findFast(report, { segments: 1, batchMax: 1 }), findPeer(report, 'bare', 'redlock', 1)],
    [
      `bare peer, lock held ${BARE_HELD_MS} ms: ${n} segments / one lock`,
      findPeer(report, 'bare', 'redlock', n, BARE_HELD_MS),
      findPeer(report, 'bare', 'redlock', 1, BARE_HELD_MS),
    ],
    ['service ORDER_BATCH_MAX=1 orders/s / service GET /health/live req/s', one, findHealth(report)],
  ];
  return pairs.filter(([, a, b]) => a && b).map(([what, a, b]) => ({ what, value: ratio(a!.ordersPerSec, b!.ordersPerSec) }));
}

/** Rows of the group-commit comparison: per hold and segments, ORDER_BATCH_MAX=1 then group commit. */
function batchRows(report: BenchmarkReport, group: Group): Array<{ r: ScenarioResult; vsOne: string }> {
  return inGroup(report, group)
    .sort((a, b) => a.holdMs - b.holdMs || a.segments - b.segments || (a.batchMax ?? Infinity) - (b.batchMax ?? Infinity))
    .map((r) => {
      const one = findFast(report, { holdMs: r.holdMs, segments: r.segments, batchMax: 1 });
      return { r, vsOne: r.batchMax === 1 ? '1.00x' : ratio(r.ordersPerSec, one?.ordersPerSec) };
    });
}

const ratioOf = (a: number | null | undefined, b: number | null | undefined): number | null =>
  a === null || a === undefined || b === null || b === undefined || !(b > 0) || !Number.isFinite(a) ? null : a / b;

/** The Redis setups group as rows (by ORDER_BATCH_MAX, then single, quorum, cluster), with ratios to the one redis-server; null when it did not run. */
export function redisSetupsSection(report: BenchmarkReport): RedisSetupsSection | null {
  const found = inGroup(report, 'redis-setups');
  if (found.length === 0) return null;
  const setupOf = (r: ScenarioResult) => r.redis ?? 'single';
  const batches = [...new Set(found.map((r) => r.batchMax))].sort((a, b) => (a ?? Infinity) - (b ?? Infinity)).reverse();
  const perOrder = (r: ScenarioResult): RedisPerOrder | null =>
    r.costs ? { redisScripts: r.costs.perUnit.redisScripts, redisCommands: r.costs.perUnit.redisCommands, redisCpuUs: r.costs.perUnit.redisCpuUs } : null;
  const rows: RedisSetupRow[] = [];
  for (const batchMax of batches) {
    const single = found.find((r) => r.batchMax === batchMax && setupOf(r) === 'single');
    const base = single ? perOrder(single) : null;
    for (const setup of REDIS_SETUPS) {
      const r = found.find((x) => x.batchMax === batchMax && setupOf(x) === setup);
      if (!r) continue;
      const cost = perOrder(r);
      rows.push({
        setup,
        id: r.id,
        batchMax,
        status: r.status,
        ordersPerSec: r.ordersPerSec,
        p99Ms: r.latency201Ms?.p99 ?? null,
        perOrder: cost,
        perServer:
          r.costs?.redisServers?.map((x) => ({
            server: x.server,
            redisScripts: x.perUnit.redisScripts,
            redisCommands: x.perUnit.redisCommands,
            redisCpuUs: x.perUnit.redisCpuUs,
          })) ?? null,
        vsSingle: {
          ordersPerSec: ratioOf(r.ordersPerSec, single?.ordersPerSec),
          p99: ratioOf(r.latency201Ms?.p99, single?.latency201Ms?.p99),
          redisScripts: ratioOf(cost?.redisScripts, base?.redisScripts),
          redisCommands: ratioOf(cost?.redisCommands, base?.redisCommands),
          redisCpuUs: ratioOf(cost?.redisCpuUs, base?.redisCpuUs),
        },
      });
    }
  }
  const s = report.settings;
  return { command: report.command, workers: s.speedWorkers, segments: s.speedSegments, holdMs: 0, rows };
}

const SETUP_NAME: Record<RedisSetup, string> = {
  single: 'one redis-server',
  quorum: 'Redlock quorum of 3',
  cluster: 'Redis Cluster, 3 masters',
};
const times = (x: number | null) => (x === null ? '-' : `${x.toFixed(2)}x`);
/** Per-server calls of a quorum or cluster: round trips (scripts) per order on each, in the setup's order. */
function perServerCell(r: RedisSetupRow): string {
  return r.perServer ? r.perServer.map((x) => x.redisScripts.toFixed(2)).join(' / ') : '-';
}

/** latest.md's section of the Redis setups group. */
function redisSetupsMarkdown(x: RedisSetupsSection): string[] {
  const out: string[] = [];
  out.push(`## Redis setups (hold 0, ${x.segments} segments, WORKERS=${x.workers})`);
  out.push('');
  out.push(
    'The same load on three Redis setups, each its own service start, each verified from PostgreSQL like every other scenario: ' +
      "**one redis-server** (REDIS_URL; every other scenario's setup), a **Redlock quorum of 3** (REDIS_LOCK_URLS: the bench's redis-server and two more started for this group, REDIS_URL the first of them: hints and the user lock stay on one server) and a **Redis Cluster of 3 masters** (REDIS_CLUSTER_NODES alone, started for this group). " +
      'Redis calls and Redis CPU are per order **summed over every server of the setup**: INFO commandstats and INFO cpu of each one. Per server: EVAL/EVALSHA calls (round trips) per order on each master, in the order of REDIS_LOCK_URLS / REDIS_CLUSTER_NODES; on the quorum every lock operation goes to all three, on the cluster a segment lock goes to the master of its slot. ' +
      'Ratios are to the one redis-server at the same ORDER_BATCH_MAX.',
  );
  out.push('');
  out.push(
    '| setup | ORDER_BATCH_MAX | orders/s | vs single | p99 | Redis calls (scripts) / order | vs single | Redis commands / order | Redis CPU µs / order | vs single | scripts / order per server | verified |',
  );
  out.push('|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|');
  for (const r of x.rows) {
    const c = r.perOrder;
    out.push(
      `| ${SETUP_NAME[r.setup]} (\`${r.id}\`) | ${batchName(r.batchMax)} | **${rate(r.ordersPerSec)}** | ${times(r.vsSingle.ordersPerSec)} | ${ms(r.p99Ms)} ms | ${c ? c.redisScripts.toFixed(2) : '-'} | ${times(r.vsSingle.redisScripts)} | ${c ? c.redisCommands.toFixed(2) : '-'} | ${c ? ms(c.redisCpuUs) : '-'} | ${times(r.vsSingle.redisCpuUs)} | ${perServerCell(r)} | ${r.status === 'ok' ? 'ok' : '**FAILED**'} |`,
    );
  }
  out.push('');
  out.push(`Command: \`${x.command}\``);
  out.push('');
  return out;
}

export interface TargetRow {
  target: string;
  measured: string;
  result: 'pass' | 'miss' | 'not measured';
}

/** Issue 8's targets, each from this run's figures. */
export function targets(report: BenchmarkReport): TargetRow[] {
  const s = report.settings;
  const n = s.speedSegments;
  const out: TargetRow[] = [];
  const w = s.speedWorkers === 1 ? '1 process' : `WORKERS=${s.speedWorkers} (the target is for 1 process)`;
  const atLeast = (target: string, a: ScenarioResult | undefined, b: ScenarioResult | undefined, bar: number, extra = '') => {
    const ok = a && b && a.status === 'ok' && b.status === 'ok' && b.ordersPerSec > 0;
    const x = ok ? a.ordersPerSec / b.ordersPerSec : NaN;
    out.push({
      target,
      measured: ok ? `${x.toFixed(2)}x (${rate(a.ordersPerSec)} / ${rate(b.ordersPerSec)} orders/s)${extra}` : a && b ? 'a scenario FAILED' : '-',
      result: ok ? (x >= bar ? 'pass' : 'miss') : 'not measured',
    });
  };
  const one = findFast(report, { batchMax: 1 });
  const group = findFast(report, { batchMax: s.batchMax });
  atLeast(`service, ${w}, ${n} segments, hold 0, ORDER_BATCH_MAX=1 >= 0.8x the bare peer`, one, findPeer(report, 'bare', 'redlock', n), 0.8);
  atLeast(
    `service with group commit (ORDER_BATCH_MAX ${batchName(s.batchMax)}), same load, >= 0.7x the bare-lua peer (aim 1x)`,
    group,
    findPeer(report, 'bare-lua', 'lua', n),
    0.7,
    s.batchMaxRead ? '' : '; the built service ignores ORDER_BATCH_MAX',
  );
  const p99 = group?.status === 'ok' ? group.latency201Ms?.p99 : undefined;
  out.push({
    target: 'service with group commit, same load: p99 <= 50 ms',
    measured: p99 === undefined ? (group ? 'the scenario FAILED' : '-') : `${ms(p99)} ms`,
    result: p99 === undefined ? 'not measured' : p99 <= 50 ? 'pass' : 'miss',
  });
  // Beside it, the same ratio of the bare peer at the same hold, when the run has it: this machine's floor.
  const bareHeld = [findPeer(report, 'bare', 'redlock', n, BARE_HELD_MS), findPeer(report, 'bare', 'redlock', 1, BARE_HELD_MS)];
  const bareX = bareHeld.every((r) => r?.status === 'ok' && r.ordersPerSec > 0) ? bareHeld[0]!.ordersPerSec / bareHeld[1]!.ordersPerSec : null;
  atLeast(
    `hold ${BARE_HELD_MS} ms (once per lock hold), ORDER_BATCH_MAX=1, ${w}: ${n} segments >= 19x one lock`,
    findFast(report, { holdMs: BARE_HELD_MS, segments: n, batchMax: 1 }),
    findFast(report, { holdMs: BARE_HELD_MS, segments: 1, batchMax: 1 }),
    19,
    bareX === null ? '' : `; the bare peer at the same hold: ${bareX.toFixed(2)}x (${rate(bareHeld[0]!.ordersPerSec)} / ${rate(bareHeld[1]!.ordersPerSec)})`,
  );
  for (const [what, list] of [
    ['the sale keeps running and verifying', report.scenarios.filter((r) => r.kind === 'sale')],
    ['the segment sweep keeps running and verifying', inGroup(report, 'sweep')],
  ] as const) {
    const bad = list.filter((r) => r.status !== 'ok');
    out.push({
      target: what,
      measured: list.length === 0 ? 'not run' : bad.length === 0 ? `${list.length} of ${list.length} verified` : `FAILED: ${bad.map((r) => r.id).join(', ')}`,
      result: list.length === 0 ? 'not measured' : bad.length === 0 ? 'pass' : 'miss',
    });
  }
  const peak = peakRss(report);
  out.push({
    target: `peak RSS of a service process < ${report.rssTargetMb} MB`,
    measured: peak === null ? 'not sampled (needs /proc)' : `${peak.toFixed(0)} MB`,
    result: peak === null ? 'not measured' : peak < report.rssTargetMb ? 'pass' : 'miss',
  });
  return out;
}

/** Plain-text table for the terminal, one block per hold time, then the sale and memory. */
export function renderTable(report: BenchmarkReport): string {
  const lines: string[] = [];
  const pad = (cells: string[], widths: number[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  const st = report.settings;
  const verdict = (r: ScenarioResult) => (r.status === 'ok' ? 'ok' : 'FAILED');

  const speed = speedRows(report);
  if (speed.length > 0) {
    lines.push(
      `The service against the bare peers: hold 0 (unless a row says otherwise), ${st.speedSegments} segments, ${st.connections} connections, ${st.durationS} s; service WORKERS=${st.speedWorkers}, each peer 1 process`,
    );
    const w = [84, 10, 8, 8, 8];
    lines.push(pad(['what', 'per s', 'p50 ms', 'p99 ms', 'verified'], w));
    for (const { what, r } of speed) lines.push(pad([what, rate(r!.ordersPerSec), ms(r!.latency201Ms?.p50), ms(r!.latency201Ms?.p99), verdict(r!)], w));
    for (const { what, value } of speedRatios(report)) lines.push(pad([`  ${what}`, value, '', '', ''], w));
    lines.push('');
  }
  for (const [group, title] of [
    ['batch', 'Group commit'],
    ['batch-sweep', 'ORDER_BATCH_MAX sweep'],
  ] as const) {
    const rows = batchRows(report, group);
    if (rows.length === 0) continue;
    lines.push(
      `${title}: service WORKERS=${st.speedWorkers}, Redlock segments; ORDER_HOLD_MS is spent once per lock hold (one hold sells up to ORDER_BATCH_MAX orders)`,
    );
    const w = [26, 9, 16, 9, 8, 8, 8, 8];
    lines.push(pad(['ORDER_HOLD_MS', 'segments', 'ORDER_BATCH_MAX', 'orders/s', 'vs 1', 'p50 ms', 'p99 ms', 'verified'], w));
    for (const { r, vsOne } of rows)
      lines.push(
        pad(
          [
            holdName(r.holdMs),
            String(r.segments),
            batchName(r.batchMax),
            rate(r.ordersPerSec),
            vsOne,
            ms(r.latency201Ms?.p50),
            ms(r.latency201Ms?.p99),
            verdict(r),
          ],
          w,
        ),
      );
    lines.push('');
  }

  const setups = redisSetupsSection(report);
  if (setups) {
    lines.push(
      `Redis setups: hold 0, ${setups.segments} segments, service WORKERS=${setups.workers}; Redis calls (scripts) and Redis CPU per order summed over every server of the setup`,
    );
    const w = [34, 9, 9, 7, 8, 8, 7, 8, 8, 7, 22, 8];
    lines.push(pad(['setup', 'BATCH', 'orders/s', 'vs 1', 'p99 ms', 'scripts', 'vs 1', 'cmds', 'redis', 'vs 1', 'scripts per server', 'verified'], w));
    for (const r of setups.rows) {
      const c = r.perOrder;
      lines.push(
        pad(
          [
            r.id,
            r.batchMax === null ? 'default' : String(r.batchMax),
            rate(r.ordersPerSec),
            times(r.vsSingle.ordersPerSec),
            ms(r.p99Ms),
            c ? c.redisScripts.toFixed(2) : '-',
            times(r.vsSingle.redisScripts),
            c ? c.redisCommands.toFixed(2) : '-',
            c ? ms(c.redisCpuUs) : '-',
            times(r.vsSingle.redisCpuUs),
            perServerCell(r),
            r.status === 'ok' ? 'ok' : 'FAILED',
          ],
          w,
        ),
      );
    }
    lines.push('');
  }

  const steady = inGroup(report, 'compare');
  const holds = [...new Set(steady.map((s) => s.holdMs))].sort((a, b) => a - b);
  const head = ['scenario', 'orders/s', 'vs 1 seg', 'ideal', 'vs nolock', 'p50 ms', 'p99 ms', 'max ms', '5xx', 'codes', 'verified'];
  const widths = [22, 9, 9, 6, 8, 8, 8, 8, 5, 30, 8];
  for (const hold of holds) {
    lines.push(
      `ORDER_HOLD_MS=${holdName(hold)}  (${st.connections} connections, ${st.durationS} s, ${st.workers} worker(s), ORDER_BATCH_MAX ${batchName(st.batchMax)})`,
    );
    lines.push(pad(head, widths));
    for (const r of steady
      .filter((s) => s.holdMs === hold)
      .sort((a, b) => (a.locking === b.locking ? a.segments - b.segments : a.locking === 'redlock' ? -1 : 1))) {
      const single = find(report, r.locking as StockLocking, hold, 1);
      const peer = r.locking === 'redlock' ? find(report, 'database', hold, r.segments) : undefined;
      lines.push(
        pad(
          [
            r.id,
            rate(r.ordersPerSec),
            r.segments === 1 ? '1.00x' : ratio(r.ordersPerSec, single?.ordersPerSec),
            `${r.segments}x`,
            ratio(r.ordersPerSec, peer?.ordersPerSec),
            ms(r.latency201Ms?.p50),
            ms(r.latency201Ms?.p99),
            ms(r.latency201Ms?.max),
            String(fivexx(r)),
            codes(r).slice(0, 30),
            r.status === 'ok' ? 'ok' : 'FAILED',
          ],
          widths,
        ),
      );
    }
    lines.push('');
  }
  const sales = report.scenarios.filter((s) => s.kind === 'sale');
  if (sales.length > 0) {
    lines.push(`The sale (ORDER_HOLD_MS=${sales[0].holdMs}): ${sales[0].stock} units, ${sales[0].buyers} buyers`);
    lines.push(pad(['layout', 'sell-out s', 'orders/s', 'orders', '201', '410', 'other', 'verified'], [22, 10, 9, 7, 6, 6, 16, 8]));
    for (const r of sales) {
      const other = Object.entries(r.statusCounts)
        .filter(([c]) => c !== '201' && c !== '410')
        .map(([c, n]) => `${c}:${n}`)
        .join(' ');
      lines.push(
        pad(
          [
            layout(r),
            r.sellOutMs === null ? '-' : (r.sellOutMs / 1000).toFixed(2),
            rate(r.ordersPerSec),
            String(r.verification.audit?.orders ?? '-'),
            String(r.statusCounts['201'] ?? 0),
            String(r.statusCounts['410'] ?? 0),
            other || '-',
            r.status === 'ok' ? 'ok' : 'FAILED',
          ],
          [22, 10, 9, 7, 6, 6, 16, 8],
        ),
      );
    }
    lines.push('');
  }
  for (const r of returnsOf(report)) {
    const x = r.returns;
    lines.push(
      `The sale with returns (ORDER_HOLD_MS=${r.holdMs}, EXPIRY_SWEEP_MS=${x.expirySweepMs}, paymentTimeoutS ${x.paymentTimeoutS}): ${layout(r)}, ${r.buyers} buyers, ${x.planned.cancel + x.planned.expire} of ${r.created} back`,
    );
    const w = [58, 40];
    for (const [what, value] of [
      ['first sell-out', `${seconds(r.sellOutMs)} (${rate(r.ordersPerSec)} orders/s)`],
      ['paid at once', `${x.pays.ok} (${rate(x.pays.perSec)}/s)`],
      ['back: cancelled + expired', `${x.returnedUnits.cancelled} + ${x.returnedUnits.expired}`],
      ['cancels/s', rate(x.cancels.perSec)],
      ['expiry lag p50 / p99 / max (expiresAt to back on sale)', spreadMs(x.expiryLagMs)],
      ['first return to resale sold out', seconds(x.resale.firstReturnToSoldOutMs)],
      ['last return to resale sold out', seconds(x.resale.lastReturnToSoldOutMs)],
      ['a returned unit on sale until resold, p50 / p99 / max', spreadMs(x.resale.onSaleMs)],
      ['statuses paid / cancelled / expired / reserved', `${x.statuses.paid} / ${x.statuses.cancelled} / ${x.statuses.expired} / ${x.statuses.reserved}`],
      ['verified', verdict(r)],
    ])
      lines.push(pad([`  ${what}`, value], w));
    lines.push('');
  }
  const costRows = report.scenarios.filter((r) => r.costs && r.groups.some((g) => g === 'speed' || g === 'batch' || g === 'soldout'));
  if (costRows.length > 0) {
    lines.push('Costs per order (201) or per answer (410, GET /health/live): CPU in µs, calls and bytes per unit; latest.md explains each column');
    const w = [28, 7, 9, 8, 8, 8, 8, 8, 8];
    lines.push(pad(['scenario', 'unit', 'svc CPU', 'scripts', 'cmds', 'redis', 'pg xact', 'WAL B', 'pg CPU'], w));
    for (const r of costRows) lines.push(pad([r.id, r.costs!.unit, ...costCells(r.costs!)], w));
    lines.push('');
  }
  lines.push("Issue 8's targets, from this run");
  const tw = [100, 12];
  for (const t of targets(report)) lines.push(pad([`${t.target}: ${t.measured}`, t.result], tw));
  lines.push('');
  const bad = failed(report);
  if (bad.length > 0) {
    lines.push('');
    lines.push(`!!! ${bad.length} SCENARIO(S) FAILED !!!`);
    for (const r of bad) for (const c of r.verification.checks.filter((x) => !x.ok)) lines.push(`!!! ${r.id}: ${c.name}: ${c.detail}`);
  } else {
    lines.push(
      `All ${report.scenarios.length} scenarios verified (I1 stock conserved, no segment < 0, I2 no user twice, I3 no false sold-out, no 5xx; GET /health/live: every answer 200${
        returnsOf(report).length > 0 ? '; the sale with returns: statuses as answered, every returned unit resold exactly once' : ''
      }).`,
    );
  }
  return lines.join('\n');
}

/** The highest RSS of any service process (the peers are not the service and do not count). */
function peakRss(report: BenchmarkReport): number | null {
  const all = report.services.filter((s) => s.target === 'service').flatMap((s) => s.processes.map((p) => p.peakRssMb));
  return all.length > 0 ? Math.max(...all) : null;
}

export function renderMarkdown(report: BenchmarkReport): string {
  const s = report.settings;
  const m = report.machine;
  const out: string[] = [];
  const bad = failed(report);
  out.push('# Flash-sale order service: load benchmark');
  out.push('');
  out.push(
    `Run ${report.startedAt} to ${report.finishedAt}${s.quick ? ' (**--quick smoke run**: short scenarios, small sweep and sale; figures are indicative only)' : ''}.`,
  );
  out.push('');
  if (bad.length > 0) {
    out.push(`> **FAILED: ${bad.length} of ${report.scenarios.length} scenarios broke an invariant or answered 5xx.**`);
    for (const r of bad) for (const c of r.verification.checks.filter((x) => !x.ok)) out.push(`> - **${r.id}**: ${c.name}: ${c.detail}`);
  } else {
    out.push(
      `All ${report.scenarios.length} scenarios verified: every order scenario from PostgreSQL (units in live orders + remaining == stocked, no segment below 0, no user with two live orders, no false sold-out, no 5xx; the bare-lua peer's remaining units from Redis${
        returnsOf(report).length > 0
          ? "; the sale with returns: every order's status as its pay or cancel was answered, every returned unit resold exactly once"
          : ''
      }), GET /health/live by every answer being 200.`,
    );
  }
  out.push('');
  out.push('## Machine and settings');
  out.push('');
  out.push(
    `- Machine: ${m.cores} cores (${m.cpuModel}), ${m.memoryGb} GB memory, ${m.os}; shared by the service, PostgreSQL, Redis and the load generator, so absolute numbers are noisy and the ratios are what matter.`,
  );
  out.push(`- Node ${m.node}; ${m.postgres}; Redis ${m.redis}.`);
  out.push(`- PostgreSQL: ${s.dependencies.postgres}; Redis: ${s.dependencies.redis}.`);
  out.push(
    `- Service: WORKERS=${s.speedWorkers} beside the peers and in the group-commit comparison (each peer is one process), WORKERS=${s.workers} in the locking comparison, the segment sweep, the sale and the sale with returns; one start per environment (STOCK_LOCKING, ORDER_HOLD_MS, WORKERS, ORDER_BATCH_MAX, EXPIRY_SWEEP_MS), ${s.warmUpS} s of unmeasured warm-up after each start (peers too).`,
  );
  out.push(
    `- ORDER_BATCH_MAX: ${batchName(s.batchMax)} wherever a row does not name another value; ORDER_HOLDS_MAX: ${s.holdsMax ?? 'service default'}; Node flags of the service: --max-old-space-size=${SERVICE_HEAP_MB} (as \`npm start\`)${(s.nodeFlags ?? []).map((f) => ` ${f}`).join('')}.${s.batchMaxRead ? '' : ' **The built service does not read ORDER_BATCH_MAX: rows that differ only in it measure the same code.**'}`,
  );
  out.push('- ORDER_HOLD_MS is spent once per lock hold, not once per order: with group commit one hold sells up to ORDER_BATCH_MAX orders.');
  out.push(`- Load: autocannon, ${s.connections} connections, POST /orders, a distinct userId per request; ${s.durationS} s per steady-state scenario.`);
  out.push(
    `- Stock layout: steady state ${s.steadyStock.toLocaleString('en-US')} units split evenly into the scenario's segments (never sells out); the sale ${s.sale ? `${s.sale.stock} units as ${s.sale.segments} x ${s.sale.stock / s.sale.segments} and as 1 x ${s.sale.stock}, ${s.sale.buyers} buyers` : 'not run'}.`,
  );
  // Absent from reports written before the sale with returns existed.
  const rp = s.returns;
  out.push(
    `- The sale with returns: ${rp ? `${rp.stock} units as ${layout(rp)}, ${rp.buyers} buyers, ${Math.round(rp.share * 100)}% of the reservations back (${Math.round(rp.cancelShare * 100)}% of those cancelled, the rest expired), paymentTimeoutS ${rp.paymentTimeoutS} s, its own service start with EXPIRY_SWEEP_MS=${rp.expirySweepMs} (every other start: the service's default)` : 'not run'}.`,
  );
  out.push(
    `- Locks, the same for every scenario: LOCK_TTL_MS=${s.lock.ttlMs}, LOCK_WAIT_MS=${s.lock.waitMs} (and DB_TIMEOUT_MS=${s.lock.waitMs}, the no-lock mode's wait bound inside PostgreSQL), LOCK_RETRY_DELAY_MS=${s.lock.retryDelayMs}, LOCK_RETRY_JITTER_MS=${s.lock.retryJitterMs}.`,
  );
  out.push(
    '- orders/s counts 201 answers only; latencies are of the 201s only (p50/p99/max, ms); GET /health/live counts 200s (req/s). The no-lock mode is STOCK_LOCKING=database: no Redis lock, the hold is spent inside the PostgreSQL transaction with the segment row locked.',
  );
  out.push(`- Command: \`${report.command}\``);
  out.push('');

  const tg = targets(report);
  out.push("## Issue 8's targets, from this run");
  out.push('');
  out.push('| target | measured | result |');
  out.push('|---|---|---|');
  for (const t of tg) out.push(`| ${t.target} | ${t.measured} | ${t.result === 'miss' ? '**miss**' : t.result} |`);
  out.push('');

  const speed = speedRows(report);
  if (speed.length > 0) {
    out.push(`## The service against the bare peers (hold 0 unless a row says otherwise, ${s.speedSegments} segments)`);
    out.push('');
    out.push(
      `Same load for every row: ${s.connections} connections, ${s.durationS} s, a fresh product of ${s.steadyStock.toLocaleString('en-US')} units in ${s.speedSegments} segments (1 for the one-lock rows), nothing held in the lock (the bare peer's two "lock held" rows hold each lock ${BARE_HELD_MS} ms: the segments-against-one-lock target's floor on this machine). The service runs as WORKERS=${s.speedWorkers}; each peer is one process. ` +
        "The bare peer is the service's order algorithm (user lock, random segment, fall over, one SQL statement inside a Redis segment lock) on plain node:http, ioredis and pg: the floor of what the service's own code costs. " +
        'The bare-lua peer holds the stock in Redis, checks and decrements it and records the buyer in one Lua script, then INSERTs the order: the design many shops pick instead. GET /health/live is the service answering with no work at all. ' +
        `The sold-out row is a product of ${s.speedSegments} units in ${s.speedSegments} segments, sold out (and its sold-out flag set) before the load; every request is a new buyer and every answer must be 410: the refusals that are most of a big sale's traffic, latencies of the 410s.`,
    );
    out.push('');
    out.push('| what | orders/s | p50 | p99 | max | answers | verified |');
    out.push('|---|--:|--:|--:|--:|---|---|');
    for (const { what, r, unit } of speed) {
      const x = r!;
      out.push(
        `| ${what} | **${rate(x.ordersPerSec)}**${unit === 'orders/s' ? '' : ` ${unit}`} | ${ms(x.latency201Ms?.p50)} | ${ms(x.latency201Ms?.p99)} | ${ms(x.latency201Ms?.max)} | ${codes(x)}${x.errors ? ` err:${x.errors}` : ''}${x.timeouts ? ` timeouts:${x.timeouts}` : ''} | ${statusWord(x)} |`,
      );
    }
    out.push('');
    const ratios = speedRatios(report);
    if (ratios.length > 0) {
      out.push('| ratio, this run | value |');
      out.push('|---|--:|');
      for (const { what, value } of ratios) out.push(`| ${what} | **${value}** |`);
      out.push('');
    }
  }

  for (const [group, title] of [
    ['batch', 'Group commit: ORDER_BATCH_MAX=1 against many orders per lock hold'],
    ['batch-sweep', 'ORDER_BATCH_MAX sweep'],
  ] as const) {
    const rows = batchRows(report, group);
    if (rows.length === 0) continue;
    out.push(`## ${title}`);
    out.push('');
    out.push(
      `The service, WORKERS=${s.speedWorkers}, Redlock segments, ${s.connections} connections, ${s.durationS} s per row. ORDER_BATCH_MAX=1 is the one-order-per-lock-hold design; above 1 the orders of one process waiting for one segment are sold in one lock hold and one SQL statement. ` +
        '**ORDER_HOLD_MS is spent once per lock hold, not once per order**: at 20 ms a single lock gets at most 50 holds per second, each selling one order with ORDER_BATCH_MAX=1 and up to ORDER_BATCH_MAX orders with group commit.',
    );
    if (!s.batchMaxRead) {
      out.push('');
      out.push('> The built service does not read ORDER_BATCH_MAX: these rows differ only in name.');
    }
    out.push('');
    out.push('| ORDER_HOLD_MS | segments | ORDER_BATCH_MAX | orders/s | vs ORDER_BATCH_MAX=1 | p50 | p99 | max | answers | lock waits (n x mean) | verified |');
    out.push('|---|--:|---|--:|--:|--:|--:|--:|---|--:|---|');
    for (const { r, vsOne } of rows) {
      out.push(
        `| ${holdName(r.holdMs)} | ${r.segments} | ${batchName(r.batchMax)} | **${rate(r.ordersPerSec)}** | ${vsOne} | ${ms(r.latency201Ms?.p50)} | ${ms(r.latency201Ms?.p99)} | ${ms(r.latency201Ms?.max)} | ${codes(r)}${r.timeouts ? ` timeouts:${r.timeouts}` : ''} | ${metricCell(r).wait} | ${statusWord(r)} |`,
      );
    }
    out.push('');
  }

  const setups = redisSetupsSection(report);
  if (setups) out.push(...redisSetupsMarkdown(setups));

  const steady = inGroup(report, 'compare');
  const holds = [...new Set(steady.map((r) => r.holdMs))].sort((a, b) => a - b);
  for (const hold of holds) {
    out.push(`## Locking modes, ORDER_HOLD_MS=${holdName(hold)} (WORKERS=${s.workers}, ORDER_BATCH_MAX ${batchName(s.batchMax)})`);
    out.push('');
    out.push('| scenario | locking | segments | orders/s | p50 | p99 | max | answers | lock busy | fallovers busy/empty | lock waits (n x mean) | verified |');
    out.push('|---|---|--:|--:|--:|--:|--:|---|--:|--:|--:|---|');
    const rows = steady.filter((r) => r.holdMs === hold).sort((a, b) => (a.locking === b.locking ? a.segments - b.segments : a.locking === 'redlock' ? -1 : 1));
    for (const r of rows) {
      const mc = metricCell(r);
      out.push(
        `| ${r.id} | ${MODE_NAME[r.locking as StockLocking]} | ${r.segments} | **${rate(r.ordersPerSec)}** | ${ms(r.latency201Ms?.p50)} | ${ms(r.latency201Ms?.p99)} | ${ms(r.latency201Ms?.max)} | ${codes(r)}${r.errors ? ` err:${r.errors}` : ''}${r.timeouts ? ` timeouts:${r.timeouts}` : ''} | ${mc.busy} | ${mc.fall} | ${mc.wait} | ${statusWord(r)} |`,
      );
    }
    out.push('');
    const single = find(report, 'redlock', hold, 1);
    const peerSingle = find(report, 'database', hold, 1);
    const ratioRows = s.segments.filter((n) => n !== 1);
    if (ratioRows.length > 0) {
      out.push('| segments | segmented / single lock | ideal | segmented / no-lock mode (same segments) | no-lock segmented / no-lock single |');
      out.push('|--:|--:|--:|--:|--:|');
      for (const n of ratioRows) {
        const seg = find(report, 'redlock', hold, n);
        const peer = find(report, 'database', hold, n);
        out.push(
          `| ${n} | **${ratio(seg?.ordersPerSec, single?.ordersPerSec)}** | ${n}x | ${ratio(seg?.ordersPerSec, peer?.ordersPerSec)} | ${ratio(peer?.ordersPerSec, peerSingle?.ordersPerSec)} |`,
        );
      }
      out.push('');
      out.push(
        hold === 0
          ? 'With no hold the lock is held only for the PostgreSQL statement, so the ideal N x is an upper bound the CPU (2 cores for everything) decides long before the locks do.'
          : `With ${hold} ms inside the lock (once per lock hold) a single lock gets at most ${rate(1000 / hold)} holds per second, so ${rate(1000 / hold)} orders/s with ORDER_BATCH_MAX=1 and up to ORDER_BATCH_MAX times that with group commit; N segments raise that bound N-fold until CPU, PostgreSQL or Redis becomes the limit.`,
      );
      out.push('');
    }
  }

  if (s.sweep) {
    out.push(`## Segment sweep (ORDER_HOLD_MS=${holdName(s.sweepHold)}, WORKERS=${s.workers}, ORDER_BATCH_MAX ${batchName(s.batchMax)})`);
    out.push('');
    const modes: StockLocking[] = s.peer ? ['redlock', 'database'] : ['redlock'];
    out.push(...sweepCharts(report, modes));
    out.push(`| segments | ${modes.map((mo) => `${MODE_NAME[mo]} orders/s | vs 1 segment`).join(' | ')} | ideal | verified |`);
    out.push(`|--:|${modes.map(() => '--:|--:').join('|')}|--:|---|`);
    for (const n of s.sweep) {
      const cells: string[] = [];
      const verdicts: string[] = [];
      for (const mo of modes) {
        const r = find(report, mo, s.sweepHold, n);
        const one = find(report, mo, s.sweepHold, 1);
        cells.push(r ? `**${rate(r.ordersPerSec)}**` : '-', r ? ratio(r.ordersPerSec, one?.ordersPerSec) : '-');
        if (r) verdicts.push(statusWord(r));
      }
      out.push(`| ${n} | ${cells.join(' | ')} | ${n}x | ${verdicts.join(' / ')} |`);
    }
    out.push('');
  }

  const sales = report.scenarios.filter((r) => r.kind === 'sale');
  if (sales.length > 0) {
    const first = sales[0];
    out.push(
      `## The sale: ${first.stock} units, ${first.buyers} buyers (ORDER_HOLD_MS=${holdName(first.holdMs)}, Redlock, WORKERS=${s.workers}, ORDER_BATCH_MAX ${batchName(s.batchMax)})`,
    );
    out.push('');
    out.push('Every buyer sends one request; the run ends when all are answered.');
    out.push('');
    out.push('| layout | time to sell out | orders/s | orders in PostgreSQL | 201 | 410 | other answers | p50 / p99 of 201s | verified |');
    out.push('|---|--:|--:|--:|--:|--:|---|--:|---|');
    for (const r of sales) {
      const other = Object.entries(r.statusCounts)
        .filter(([c]) => c !== '201' && c !== '410')
        .map(([c, n]) => `${c}:${n}`)
        .join(' ');
      const orders = r.verification.audit?.orders;
      const exact = orders === r.stock ? ` (exactly ${r.stock})` : ` (**expected ${r.stock}**)`;
      out.push(
        `| ${layout(r)} | ${r.sellOutMs === null ? '-' : `${(r.sellOutMs / 1000).toFixed(2)} s`} | **${rate(r.ordersPerSec)}** | ${orders ?? '-'}${exact} | ${r.statusCounts['201'] ?? 0} | ${r.statusCounts['410'] ?? 0} | ${other || '-'}${r.timeouts ? ` timeouts:${r.timeouts}` : ''} | ${ms(r.latency201Ms?.p50)} / ${ms(r.latency201Ms?.p99)} ms | ${statusWord(r)} |`,
      );
    }
    const seg = sales.find((r) => r.segments !== 1);
    const one = sales.find((r) => r.segments === 1);
    if (seg && one && seg.sellOutMs && one.sellOutMs) {
      out.push('');
      out.push(`Segmented sells out ${(one.sellOutMs / seg.sellOutMs).toFixed(2)}x faster than the single lock (ideal ${seg.segments}x).`);
    }
    out.push('');
  }

  for (const r of returnsOf(report)) {
    const x = r.returns;
    const back = x.returnedUnits.cancelled + x.returnedUnits.expired;
    out.push(
      `## The sale with returns: ${r.stock} units as ${layout(r)}, ${r.buyers} buyers, ${back} units back and resold (ORDER_HOLD_MS=${holdName(r.holdMs)}, Redlock, WORKERS=${r.workers}, ORDER_BATCH_MAX ${batchName(r.batchMax)}, EXPIRY_SWEEP_MS=${x.expirySweepMs})`,
    );
    out.push('');
    out.push(
      `${RETURNS_MEASURES} (b) includes waiting out the ${x.paymentTimeoutS} s payment timeout that the run sets; the service's own share is the expiry lag and the time a returned unit stays on sale. Times marked PG come from PostgreSQL's clock (orders' created_at, expires_at, closed_at).`,
    );
    out.push('');
    const pct = (n: number) => (r.created > 0 ? ` (${Math.round((n / r.created) * 100)}%)` : '');
    const rows: Array<[string, string]> = [
      [
        '(a) first sell-out: first request to last 201',
        `**${seconds(r.sellOutMs)}**, ${rate(r.ordersPerSec)} orders/s; ${r.statusCounts['201'] ?? 0} x 201, ${r.statusCounts['410'] ?? 0} x 410 of ${r.buyers} buyers`,
      ],
      [
        'paid at once, before any return',
        `${x.pays.ok} of ${x.planned.pay}${pct(x.pays.ok)} in ${ms(x.pays.elapsedMs)} ms, ${rate(x.pays.perSec)} pays/s (${BACKEND_CONCURRENCY} at a time)`,
      ],
      [
        'back on sale (PG)',
        `${back} units: ${x.returnedUnits.cancelled} cancelled${pct(x.returnedUnits.cancelled)}, ${x.returnedUnits.expired} expired${pct(x.returnedUnits.expired)} (paymentTimeoutS ${x.paymentTimeoutS} s)`,
      ],
      [
        '(c) cancels, while the new buyers ask',
        `**${rate(x.cancels.perSec)} cancels/s**: ${x.cancels.ok} in ${ms(x.cancels.elapsedMs)} ms, ${BACKEND_CONCURRENCY} at a time, p50 / p99 ${ms(x.cancels.latencyMs?.p50)} / ${ms(x.cancels.latencyMs?.p99)} ms`,
      ],
      [
        '(c) expiry lag: expiresAt to units back on sale (PG), p50 / p99 / max',
        `**${spreadMs(x.expiryLagMs)}** over ${x.expiryLagMs?.count ?? 0} orders; each process sweeps every ${x.expirySweepMs} ms`,
      ],
      ['(b) first return to the resale sold out (PG)', `**${seconds(x.resale.firstReturnToSoldOutMs)}**`],
      ['last return to the resale sold out (PG)', seconds(x.resale.lastReturnToSoldOutMs)],
      ['a returned unit on sale until sold again (PG; k-th back paired with k-th resold), p50 / p99 / max', spreadMs(x.resale.onSaleMs)],
      [
        'new buyers (one request each)',
        `${x.resale.requests} requests in ${x.resale.elapsedS.toFixed(2)} s: ${countsText(x.resale.statusCounts)}; their pays ${countsText(x.resale.paysStatusCounts)}`,
      ],
      ['pay / cancel answers after the sell-out', `pay ${countsText(x.pays.statusCounts)}; cancel ${countsText(x.cancels.statusCounts)}`],
      ['orders at the end (PG)', `paid ${x.statuses.paid}, cancelled ${x.statuses.cancelled}, expired ${x.statuses.expired}, reserved ${x.statuses.reserved}`],
      ['verified', `${statusWord(r)}: ${r.verification.checks.map((c) => `${c.ok ? '' : '**FAILED** '}${c.name}`).join('; ')}`],
    ];
    out.push('| figure | this run |');
    out.push('|---|---|');
    for (const [what, value] of rows) out.push(`| ${what} | ${value} |`);
    out.push('');
  }

  out.push(...costSection(report));

  out.push('## Memory (peak RSS per process, sampled every 500 ms)');
  out.push('');
  const peak = peakRss(report);
  if (peak === null) {
    out.push('Not measured (needs /proc).');
  } else {
    out.push(
      `Highest of any service process: **${peak.toFixed(0)} MB** (target < ${report.rssTargetMb} MB: ${peak < report.rssTargetMb ? 'met' : '**NOT MET**'}). The peers are listed for comparison and do not count.`,
    );
    out.push('');
    out.push('| process start | primary (with WORKERS=1: the one serving process) | workers |');
    out.push('|---|--:|---|');
    for (const svc of report.services) {
      const primary = svc.processes.find((p) => p.role === 'primary');
      const workers = svc.processes.filter((p) => p.role === 'worker');
      const what =
        svc.target === 'service'
          ? `service ${svc.locking}, hold ${svc.holdMs} ms, WORKERS=${svc.workers}, ORDER_BATCH_MAX ${batchName(svc.batchMax)}${svc.expirySweepMs ? `, EXPIRY_SWEEP_MS=${svc.expirySweepMs}` : ''}${svc.redis && svc.redis !== 'single' ? `, ${SETUP_NAME[svc.redis]}` : ''}`
          : `peer ${svc.target}${svc.target === 'bare' ? ` (${svc.locking})` : ''}, hold ${svc.holdMs} ms`;
      out.push(
        `| ${what} | ${primary ? `${primary.peakRssMb.toFixed(0)} MB` : '-'} | ${workers.map((w) => `${w.peakRssMb.toFixed(0)} MB`).join(', ') || '-'} |`,
      );
    }
  }
  out.push('');
  out.push('## Lock counters');
  out.push('');
  out.push(
    'From GET /metrics deltas around each scenario (flashsale_segment_lock_busy_total, flashsale_segment_fallovers_total, flashsale_lock_wait_seconds), checked against the orders PostgreSQL holds:',
  );
  out.push('');
  const sources = new Map<string, string[]>();
  const what: Record<string, string> = {
    'all-workers': 'one scrape covered every worker',
    'summed-per-worker': 'per-worker counters, one scrape per worker summed',
    partial: 'figures marked * are from one worker only (partial)',
  };
  for (const r of report.scenarios) {
    // "Not available" has several reasons (a peer, no order, no answer); each gets its own line.
    const key = what[r.metrics.source] ?? `not available (${r.metrics.note})`;
    sources.set(key, [...(sources.get(key) ?? []), r.id]);
  }
  for (const [why, ids] of sources) out.push(`- ${why}: ${ids.join(', ')}`);
  out.push('');
  out.push(
    '"lock waits" = orders that found every live segment busy and waited, times their mean wait. In the no-lock mode the waiting happens inside PostgreSQL and is not counted.',
  );
  out.push('');
  return out.join('\n');
}

/** Per-unit cost cells: target CPU µs, Redis scripts, Redis commands, Redis CPU µs, PG statements, PG write transactions, WAL bytes, PG CPU µs. */
function costCells(c: ScenarioCosts): string[] {
  const p = c.perUnit;
  const calls = (n: number) => n.toFixed(2);
  return [
    ms(p.targetCpuUs),
    calls(p.redisScripts),
    calls(p.redisCommands),
    ms(p.redisCpuUs),
    p.pgStatements == null ? '-' : p.pgStatements.toFixed(3),
    p.pgWriteTransactions.toFixed(3),
    p.pgWalBytes.toFixed(0),
    ms(p.pgCpuUs),
  ];
}

/** latest.md's costs table: every scenario that read them, with what each column counts. */
function costSection(report: BenchmarkReport): string[] {
  const rows = report.scenarios.filter((r) => r.costs);
  if (rows.length === 0) return [];
  const out: string[] = [];
  out.push('## Costs per order and per refusal');
  out.push('');
  out.push(
    "Read just before each scenario's load and again once its target went quiet, then divided by the orders PostgreSQL holds for the scenario's product (unit: order; the sale's figures carry its 410s too) or by the answers (unit: answer: the sold-out product's 410s, GET /health/live). " +
      "**service CPU**: user + system time of the target's processes (the service's primary and workers, or the peer), from /proc. " +
      "**Redis scripts**: EVAL/EVALSHA calls, each one round trip (every Redis call of the service's order path is a script; the bare peer also sends plain commands). **Redis commands**: every command INFO commandstats counted, those run inside scripts included. **Redis CPU**: INFO cpu, the whole server. Calls and CPU are summed over every Redis server of the scenario's setup (the three masters of a Redlock quorum, `-rq`, or of a Redis Cluster, `-rc`). " +
      '**PG statements**: every statement PostgreSQL ran in the database, read-only ones included (pg_stat_statements; - where it is not loaded); **PG write transactions**: transaction ids handed out (read-only statements take none; they show in PG CPU only); **WAL bytes**: the WAL insert position; **PG CPU**: every PostgreSQL process, from /proc (a PostgreSQL on another host: -). ' +
      "The machine's 2 cores are shared by the load generator, the target, Redis and PostgreSQL, so CPU per unit includes what contention costs (busy locks retried, context switches).",
  );
  out.push('');
  out.push(
    '| scenario | unit | units | service CPU µs | Redis scripts | Redis commands | Redis CPU µs | PG statements | PG write transactions | WAL bytes | PG CPU µs |',
  );
  out.push('|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|');
  for (const r of rows) out.push(`| ${r.id} | ${r.costs!.unit} | ${r.costs!.units} | ${costCells(r.costs!).join(' | ')} |`);
  out.push('');
  return out;
}

/** A round top for an axis: `v` rounded up to a step of 1, 2 or 5 times a power of ten, about a fifth of `v`. */
function axisTop(v: number): number {
  const raw = Math.max(v, 1) / 5;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * p).find((x) => x >= raw) ?? 10 * p;
  return Math.ceil(v / step) * step;
}

/**
 * One Mermaid xychart per locking mode of the sweep: bars are what was measured, the line is the
 * ideal (N x that mode's single lock). Mermaid draws it where the report is read (GitHub, most
 * Markdown viewers); a chart per mode keeps each one readable. Newer Mermaid also draws a legend
 * from the series titles; the caption under the chart says the same for older ones.
 */
function sweepCharts(report: BenchmarkReport, modes: StockLocking[]): string[] {
  const s = report.settings;
  const value = (v: number) => Number(rate(v));
  const charts = modes.map((mode) => {
    const one = find(report, mode, s.sweepHold, 1);
    const points = (s.sweep ?? [])
      .map((n) => ({ n, r: find(report, mode, s.sweepHold, n) }))
      .filter((p): p is { n: number; r: ScenarioResult } => p.r !== undefined && Number.isFinite(p.r.ordersPerSec));
    return { mode, points, measured: points.map((p) => value(p.r.ordersPerSec)), ideal: one ? points.map((p) => value(one.ordersPerSec * p.n)) : [] };
  });
  // One y scale for every chart, so the modes compare by eye.
  const top = axisTop(Math.max(1, ...charts.flatMap((c) => [...c.measured, ...c.ideal])) * 1.05);
  const out: string[] = [];
  for (const { mode, points, measured, ideal } of charts) {
    if (points.length === 0) continue;
    const failedAt = points.filter((p) => p.r.status !== 'ok').map((p) => p.n);
    out.push('```mermaid');
    out.push('---');
    out.push('config:');
    out.push('  xyChart: { width: 720, height: 360, showLegend: true }');
    out.push('  themeVariables: { xyChart: { plotColorPalette: "#4e79a7, #e15759" } }');
    out.push('---');
    out.push('xychart-beta');
    out.push(`  title "${MODE_NAME[mode]}, hold ${s.sweepHold} ms per lock hold"`);
    out.push(`  x-axis "segments" [${points.map((p) => p.n).join(', ')}]`);
    out.push(`  y-axis "orders/s" 0 --> ${top}`);
    out.push(`  bar "measured" [${measured.join(', ')}]`);
    if (ideal.length > 0) out.push(`  line "ideal (N x 1 segment)" [${ideal.join(', ')}]`);
    out.push('```');
    out.push('');
    out.push(
      `*${MODE_NAME[mode]}: blue bars = orders/s measured (201s only, ${s.connections} connections, ${s.workers} worker(s)); red line = the ideal, N x its own 1-segment rate.${failedAt.length > 0 ? ` **FAILED at ${failedAt.join(', ')} segments.**` : ''}*`,
    );
    out.push('');
  }
  return out;
}

export function writeReports(report: BenchmarkReport, outDir: string): { json: string; md: string } {
  mkdirSync(outDir, { recursive: true });
  const files = { json: join(outDir, 'latest.json'), md: join(outDir, 'latest.md') };
  writeFileSync(files.json, `${JSON.stringify(report, null, 2)}\n`);
  writeFileSync(files.md, `${renderMarkdown(report)}\n`);
  return files;
}
