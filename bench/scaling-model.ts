// The scaling model of docs/scaling.md (`npm run scaling`): what a sale of U units to N buyers within
// T seconds takes, from the costs the benchmark measured (latest.json). Arithmetic, not a simulation:
// every request is an order, a loser (the order path in vain before the sell-out) or a refusal, each
// costing what the benchmark measured; every input is printed with where it comes from.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { projectRoot } from '../src/infrastructure/project-root';
import { Flag, HELP, usageText, readFlags, toggle, value } from './cli';
import type { ScenarioCosts } from './costs';
import { findFast, findHealth, findSoldOut } from './report';
import type { BenchmarkReport, ScenarioResult } from './types';
import { BEHIND_UNITS_POLL_S, type QueueReport } from './waiting-room';

export type Source = 'measured' | 'derived' | 'extrapolated' | 'assumed';

/** One number the model uses, and where it comes from; `basis`: the scenario it was read from, or why it is what it is. */
const input = (source: Source, value: number, unit: string, basis: string) => ({ value, unit, source, basis });
export type Input = ReturnType<typeof input>;

/** What one request of a kind costs (unitCost). Redis calls are split by where their keys live on a Redis Cluster. */
export type UnitCost = ReturnType<typeof unitCost>;

/** The measured costs the model runs on (readMeasured): what an order and a refusal cost, and the rates. */
export type Measured = ReturnType<typeof readMeasured>;

export type Sale = ModelOptions['sale'];
/** Planning figures, none measured here (CAPACITY_BASIS says what each is): flag, argument, default, least, most, help. */
const CAPACITY_FLAGS = {
  processUtil: ['process-util', 'F', 0.7, 0.01, 1, 'share of a core per service process'],
  redisUtil: ['redis-util', 'F', 0.7, 0.01, 1, "share of a Redis master's core"],
  pgCores: ['pg-cores', 'N', 16, 1, Infinity, 'cores of the PostgreSQL primary'],
  pgUtil: ['pg-util', 'F', 0.7, 0.01, 1, "share of PostgreSQL's cores"],
  pgCommitsPerS: ['pg-commits', 'N', 20_000, 1, Infinity, 'commits/s the primary sustains'],
  walMBps: ['wal-mbps', 'N', 100, 0.001, Infinity, 'WAL MB/s the primary sustains'],
  admitFactor: ['admit', 'F', 2, 1, Infinity, 'the queue in front admits F x units until sold out, F >= 1'],
} as const satisfies Record<string, readonly [string, string, number, number, number, string]>;
export type Capacity = Record<keyof typeof CAPACITY_FLAGS, number>;
const capacityOf = (f: (flag: (typeof CAPACITY_FLAGS)[keyof Capacity]) => number) =>
  Object.fromEntries(Object.entries(CAPACITY_FLAGS).map(([k, flag]) => [k, f(flag)])) as Capacity;
export const DEFAULT_CAPACITY = capacityOf(([, , dflt]) => dflt);

const CAPACITY_BASIS: Record<keyof Capacity, [string, string]> = {
  processUtil: ['of one core', 'a Node process runs its event loop on one core; headroom for bursts and GC'],
  redisUtil: ['of one core', 'Redis runs commands on one thread; headroom for bursts'],
  pgCores: ['cores', 'a dedicated PostgreSQL primary'],
  pgUtil: ['of its cores', 'headroom'],
  pgCommitsPerS: [
    'commits/s',
    'synchronous_commit on, local NVMe, concurrent commits sharing WAL flushes; measure yours with pgbench',
  ],
  walMBps: ['MB/s', 'sustained WAL write and replication on the primary'],
  admitFactor: ['x units', 'the queue in front lets this many requests per unit into the order path until sold out'],
};

/** The order path without a queue in front, or behind one that caps the requests reaching it before the sell-out. */
export const VARIANTS = [
  {
    name: 'as built',
    what: "every buyer sends an order; refusals cost what the benchmark measured (the door's memory: no Redis call, no PostgreSQL statement); requests before the sell-out take the order path",
  },
  {
    name: '+ queue',
    what: 'the waiting room in front (docs/waiting-room.md) admits at most admitFactor x units into the order path until sold out; the rest wait',
    /** The most losers it lets into the order path; unlimited when absent. */
    maxLosers: (sale: Sale, cap: Capacity) => Math.max(0, (cap.admitFactor - 1) * sale.units),
  },
];
export type Variant = (typeof VARIANTS)[number];

/**
 * A loser arrived before the sell-out and took the order path in vain: the order's service CPU and
 * Redis calls, no write, two PostgreSQL reads (the stock read before SOLD_OUT and the buyer
 * lookup, each costed as a refusal's read), and while every segment with stock is locked it
 * polls: one attempt per retry delay, two round trips per refused acquire (Redlock's acquire and
 * its clean-up release), until the sell-out (`waitS` on average). Extrapolated from the code's
 * wait loop, not measured: the benchmark's 100 connections never make that many waiters. The
 * polls' service CPU is not counted.
 */
export function loserCost(m: Measured, waitS: number): UnitCost {
  const polls = waitS / (m.retryDelayMs / 1000);
  return {
    ...m.order,
    spreadCalls: m.order.spreadCalls + 2 * polls,
    pgPrimaryCpuUs: 2 * m.refusal.pgPrimaryCpuUs,
    pgWriteTransactions: 0,
    walBytes: 0,
  };
}

export type Limit = 'product slot (one Redis master)' | 'PostgreSQL primary CPU' | 'PostgreSQL commits/s' | 'WAL MB/s';
/**
 * The limits more buyers can push past 100%: one master holds the product's slot and one primary
 * takes every write, however many processes and masters are added. Commits and WAL only slow the
 * selling down (the sell rate is held at what they sustain), so they never pass 100%.
 */
const WALLS: Limit[] = ['product slot (one Redis master)', 'PostgreSQL primary CPU'];

export type Plan = ReturnType<typeof plan>;

const sum = (xs: number[]) => xs.reduce((s, x) => s + x, 0);

export function plan(m: Measured, sale: Sale, cap: Capacity, variant: Variant) {
  const requests = sale.buyers * sale.requestsPerBuyer;
  const arrivalPerS = requests / sale.seconds;
  const { order, refusal } = m;
  // Units sell as fast as the slowest of: arrivals, the segment locks, PostgreSQL's commits, its WAL.
  const rates = [
    ['arrivals', arrivalPerS],
    ['segment locks', sale.segments * m.segmentOrdersPerS],
    ['PostgreSQL commits/s', order.pgWriteTransactions > 0 ? cap.pgCommitsPerS / order.pgWriteTransactions : Infinity],
    ['WAL MB/s', order.walBytes > 0 ? (cap.walMBps * 1e6) / order.walBytes : Infinity],
  ] as const;
  const [sellLimitedBy, sellPerS] = rates.reduce((a, b) => (b[1] < a[1] ? b : a));
  const sellOutS = sale.units / sellPerS;
  const arrivedBeforeSellOut = Math.min(requests, arrivalPerS * sellOutS);
  const losers = Math.min(Math.max(0, arrivedBeforeSellOut - sale.units), variant.maxLosers?.(sale, cap) ?? Infinity);
  const refusals = Math.max(0, requests - sale.units - losers);
  // Losers arrive evenly until the sell-out (or until the last buyer came) and wait for it.
  const loserWaitS = sellOutS - Math.min(sale.seconds, sellOutS) / 2;
  const mix: Array<[number, UnitCost]> = [
    [sale.units, order],
    [losers, loserCost(m, loserWaitS)],
    [refusals, refusal],
  ];
  // The work is done while buyers arrive, or until the sell-out when that takes longer.
  const windowS = Math.max(sale.seconds, sellOutS);
  const perS = (f: (c: UnitCost) => number) => sum(mix.map(([n, c]) => n * f(c))) / 1e6 / windowS;

  const serviceCores = perS((c) => c.serviceCpuUs);
  const floorCores =
    serviceCores - (refusals * (refusal.serviceCpuUs - Math.min(refusal.serviceCpuUs, m.floorCpuUs))) / 1e6 / windowS;
  const productSlotCores = perS((c) => c.productSlotCalls * c.redisCpuPerCallUs);
  const spreadCores = perS((c) => c.spreadCalls * c.redisCpuPerCallUs);
  const pgPrimaryCores = perS((c) => c.pgPrimaryCpuUs);
  const commits = sale.units * order.pgWriteTransactions;
  const walMB = (sale.units * order.walBytes) / 1e6;
  const utilisation: Record<Limit, number> = {
    'product slot (one Redis master)': productSlotCores / cap.redisUtil,
    'PostgreSQL primary CPU': pgPrimaryCores / (cap.pgCores * cap.pgUtil),
    'PostgreSQL commits/s': commits / sellOutS / cap.pgCommitsPerS,
    'WAL MB/s': walMB / sellOutS / cap.walMBps,
  };
  const [firstLimit] = (Object.entries(utilisation) as Array<[Limit, number]>).reduce((a, b) => (b[1] > a[1] ? b : a));
  return {
    variant: variant.name,
    requests,
    arrivalPerS,
    /** Orders per second while units last, and what holds it there. */
    sellPerS,
    sellLimitedBy,
    sellOutS,
    losers,
    refusals,
    serviceCores,
    processes: Math.ceil(serviceCores / cap.processUtil),
    /** Processes if a refusal cost no more than GET /health/live: the least any change of the refusal path can reach. */
    processesAtFloor: Math.ceil(floorCores / cap.processUtil),
    /** Cores of the one master that holds the product's slot. */
    productSlotCores,
    /** Masters for the keys that spread over the cluster (segment locks, user locks); the product's master comes on top. */
    spreadMasters: Math.ceil(spreadCores / cap.redisUtil),
    pgPrimaryCores,
    commits,
    commitsPerS: commits / sellOutS,
    walMB,
    walMBps: walMB / sellOutS,
    /** Demand over what one unit of a resource that cannot be split gives: above 1, the plan does not fit. */
    utilisation,
    /** The most used of them: the first to saturate. */
    firstLimit,
  };
}

/**
 * The most buyers per second the sale fits with, everything else as given: where the product's
 * slot or the primary's CPU reaches 100% (found by bisection; the losers make the load grow faster
 * than the buyers). Infinity when neither grows with the buyers (what grows can be scaled out).
 */
export function maxBuyersPerS(m: Measured, sale: Sale, cap: Capacity, variant: Variant): number {
  const over = (buyers: number) => {
    const p = plan(m, { ...sale, buyers }, cap, variant);
    return WALLS.some((l) => p.utilisation[l] >= 1);
  };
  let lo = 0;
  let hi = sale.buyers;
  while (!over(hi)) {
    if (hi > 1e13) return Infinity;
    [lo, hi] = [hi, hi * 2];
  }
  for (let i = 0; i < 60 && hi - lo > 1; i++) {
    const mid = (lo + hi) / 2;
    [lo, hi] = over(mid) ? [lo, mid] : [mid, hi];
  }
  return lo / sale.seconds;
}

/** A scenario's cost per unit as the model splits it. productSlotCalls: the gate script, once per request; extraSpread: a cluster's user lock. */
function unitCost(c: ScenarioCosts, productSlotCalls: number, extraSpread = 0) {
  const p = c.perUnit;
  return {
    serviceCpuUs: p.targetCpuUs ?? NaN,
    /** Round trips on the product's hash slot (the hints: sold-out flag, empty segments, stock generation): one master, however many there are. */
    productSlotCalls: Math.min(productSlotCalls, p.redisScripts),
    /** Round trips whose keys hash over every master (segment locks, the user lock). */
    spreadCalls: Math.max(0, p.redisScripts - productSlotCalls) + extraSpread,
    redisCpuPerCallUs: p.redisScripts > 0 ? p.redisCpuUs / p.redisScripts : 0,
    pgPrimaryCpuUs: p.pgCpuUs ?? NaN,
    pgWriteTransactions: p.pgWriteTransactions,
    walBytes: p.pgWalBytes,
  };
}

export class ModelInputError extends Error {}

/**
 * Reads the measured costs out of a benchmark report. `batch`: the orders' ORDER_BATCH_MAX, 'group'
 * (the run's group-commit rows) or 'one' (ORDER_BATCH_MAX=1). `cluster`: on a Redis Cluster the
 * order's entry is two calls (the product's hints, then the user lock on the user's slot), one more
 * than the one script measured on a single Redis.
 */
export function readMeasured(report: BenchmarkReport, batch: 'group' | 'one', cluster: boolean) {
  if (!report.scenarios.some((r) => r.costs)) {
    throw new ModelInputError(
      'this report has no cost figures (it was written before the benchmark read them): run npm run bench, then this again',
    );
  }
  const batchMax = batch === 'one' ? 1 : report.settings.batchMax;
  const order = findFast(report, { batchMax });
  const oneSegment = findFast(report, { batchMax, segments: 1 });
  const refusal = findSoldOut(report);
  const floor = findHealth(report);
  const missing: string[] = [];
  // What the model needs from a report, and (in brackets) the benchmark flag whose absence leaves it out.
  const need = (r: ScenarioResult | undefined, what: string): ScenarioCosts | null => {
    if (!r?.costs || r.status !== 'ok') missing.push(what);
    return r?.costs && r.status === 'ok' ? r.costs : null;
  };
  const hold0 = 'keep --hold 0 and the group-commit comparison (no --no-group-commit)';
  const [oc, rc, fc] = [
    need(order, `the group-commit and ORDER_BATCH_MAX=1 orders at hold 0 (one process) (${hold0})`),
    need(refusal, 'the refusals of a sold-out product (no --no-sold-out)'),
    need(floor, 'GET /health/live (no --no-peers)'),
  ];
  if (!oneSegment || oneSegment.status !== 'ok')
    missing.push(`one segment at hold 0 with the same ORDER_BATCH_MAX (${hold0})`);
  if (missing.length > 0 || !oc || !rc || !fc || !oneSegment) {
    throw new ModelInputError(
      `the report lacks, or has failed: ${missing.join('; ')}. Run the benchmark (npm run bench) with those scenarios.`,
    );
  }
  const floorCpuUs = fc.perUnit.targetCpuUs;
  if (floorCpuUs === null || [oc.perUnit.pgCpuUs, oc.perUnit.targetCpuUs, rc.perUnit.pgCpuUs].includes(null)) {
    throw new ModelInputError(
      'the report has no CPU figures: the benchmark reads them from /proc, with PostgreSQL on the same machine',
    );
  }
  const retryDelayMs = report.settings.lock.retryDelayMs + report.settings.lock.retryJitterMs / 2;
  const orderCost = unitCost(oc, 1, cluster ? 1 : 0);
  const refusalCost = unitCost(rc, 1);
  const [ord, ref] = [order!, refusal!];
  const m = (v: number, unit: string, from: ScenarioResult, what = '') =>
    input('measured', v, unit, `${from.id}${what}`);
  const d = (v: number, unit: string, basis: string) => input('derived', v, unit, basis);
  const userLock = input('assumed', 1, 'call', 'the cluster splits the entry script in two');
  const inputs: Array<[string, Input]> = [
    ['order: service CPU', m(orderCost.serviceCpuUs, 'µs', ord)],
    ['order: Redis round trips (scripts)', m(oc.perUnit.redisScripts, 'calls', ord)],
    ...(cluster ? [['order: + user lock on its own slot (cluster)', userLock] as [string, Input]] : []),
    ['order: Redis CPU per call', d(orderCost.redisCpuPerCallUs, 'µs', `Redis CPU / scripts of ${ord.id}`)],
    [
      'order: PostgreSQL write transactions',
      m(orderCost.pgWriteTransactions, 'per order', ord, ' (1 / mean orders per commit)'),
    ],
    ['order: WAL', m(orderCost.walBytes, 'bytes', ord)],
    ['order: PostgreSQL CPU', m(orderCost.pgPrimaryCpuUs, 'µs', ord)],
    ['refusal: service CPU', m(refusalCost.serviceCpuUs, 'µs', ref)],
    ['refusal: Redis round trips (scripts)', m(rc.perUnit.redisScripts, 'calls', ref)],
    ['refusal: Redis CPU per call', d(refusalCost.redisCpuPerCallUs, 'µs', `Redis CPU / scripts of ${ref.id}`)],
    ['refusal: PostgreSQL CPU (the buyer lookup)', m(refusalCost.pgPrimaryCpuUs, 'µs', ref)],
    [
      'refusals per second, one process',
      m(ref.ordersPerSec, '410/s', ref, ', sharing 2 cores with PostgreSQL, Redis and the load'),
    ],
    ['floor: service CPU of GET /health/live', m(floorCpuUs, 'µs', floor!)],
    [
      'one segment: orders per second',
      m(
        oneSegment.ordersPerSec,
        'orders/s',
        oneSegment,
        ', one process; N segments taken as N times this (extrapolated)',
      ),
    ],
    [
      "loser: pause between a waiting order's lock attempts",
      d(
        retryDelayMs,
        'ms',
        "the run's LOCK_RETRY_DELAY_MS + LOCK_RETRY_JITTER_MS / 2; 2 round trips per attempt until the sell-out (extrapolated)",
      ),
    ],
  ];
  return {
    order: orderCost,
    refusal: refusalCost,
    /** GET /health/live's service CPU: the least any answer can cost. */
    floorCpuUs,
    /** One segment, one process, hold 0. */
    segmentOrdersPerS: oneSegment.ordersPerSec,
    refusalsPerSProcess: ref.ordersPerSec,
    retryDelayMs,
    inputs,
  };
}

// ---- printing ----

function num(n: number | null): string {
  if (n === null || !Number.isFinite(n)) return '-';
  const a = Math.abs(n);
  if (a >= 100) return Math.round(n).toLocaleString('en-US');
  if (a >= 10) return n.toFixed(1);
  return n.toFixed(a >= 1 ? 2 : 3);
}

function table(indent: string, rows: string[][]): string[] {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => indent + r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  '));
}

export type ModelOptions = Omit<ReturnType<typeof parseModelArgs>, 'help'>;

export function render(report: BenchmarkReport, o: ModelOptions): string {
  const m = readMeasured(report, o.batch, o.cluster);
  const { sale, capacity: cap } = o;
  const capInputs = (Object.keys(CAPACITY_BASIS) as Array<keyof Capacity>).map((k): [string, Input] => [
    k,
    input('assumed', cap[k], ...CAPACITY_BASIS[k]),
  ]);
  const plans = VARIANTS.map((v) => plan(m, sale, cap, v));
  const row = (what: string, f: (p: Plan, i: number) => string) => [what, ...plans.map(f)];
  const pct = (x: number) => `${Math.round(x * 100)}%`;
  const bySegments = o.segmentList.map((segments) => plan(m, { ...sale, segments }, cap, VARIANTS[0]));
  return [
    `Scaling model: ${num(sale.buyers)} buyers x ${sale.requestsPerBuyer} request(s) in ${sale.seconds} s for ${num(sale.units)} units in ${sale.segments} segments`,
    `Costs from ${relative(process.cwd(), o.results)}: ${report.settings.quick ? '--quick run (PROVISIONAL)' : 'full run'} of ${report.startedAt}, ${report.machine.cores} cores (${report.machine.cpuModel}); orders with ${o.batch === 'one' ? 'ORDER_BATCH_MAX=1' : 'group commit'}${o.cluster ? ', on a Redis Cluster' : ', on one Redis'}`,
    '',
    'Inputs',
    ...table('  ', [
      ['input', 'value', 'unit', 'source', 'from'],
      ...[...m.inputs, ...capInputs].map(([name, i]) => [name, num(i.value), i.unit, i.source, i.basis]),
    ]),
    '',
    'What the sale takes, without and with a queue in front',
    ...VARIANTS.map((v) => `  ${v.name}: ${v.what}`),
    ...table('  ', [
      ['', ...plans.map((p) => p.variant)],
      row('requests per second', (p) => num(p.arrivalPerS)),
      row('sell-out after (s)', (p) => num(p.sellOutS)),
      row('  selling held by', (p) => p.sellLimitedBy),
      row('losers (order path in vain)', (p) => num(p.losers)),
      row('refusals after the sell-out', (p) => num(p.refusals)),
      row('service cores', (p) => num(p.serviceCores)),
      row(`service processes (${pct(cap.processUtil)} of a core)`, (p) => num(p.processes)),
      row('  if a refusal cost GET /health/live', (p) => num(p.processesAtFloor)),
      row('Redis: product slot, cores of 1 master', (p) => num(p.productSlotCores)),
      row(`Redis: masters for locks (${pct(cap.redisUtil)} each)`, (p) => num(p.spreadMasters)),
      row('PostgreSQL primary cores', (p) => num(p.pgPrimaryCores)),
      row('commits in all', (p) => num(p.commits)),
      row('commits/s while selling', (p) => num(p.commitsPerS)),
      row('WAL MB in all', (p) => num(p.walMB)),
      row('WAL MB/s while selling', (p) => num(p.walMBps)),
      ...(Object.keys(plans[0].utilisation) as Limit[]).map((l) => row(`use: ${l}`, (p) => pct(p.utilisation[l]))),
      row('FIRST LIMIT', (p) => p.firstLimit),
      row('most buyers/s that fit (slot, primary CPU)', (_, i) => {
        const b = maxBuyersPerS(m, sale, cap, VARIANTS[i]);
        return Number.isFinite(b) ? num(b) : 'no bound';
      }),
    ]),
    '',
    `Hot segments: selling ${num(sale.units)} units at ${num(plans[0].arrivalPerS)} requests/s, by segments (variant "${VARIANTS[0].name}")`,
    ...table('  ', [
      ['segments', 'orders/s', 'held by', 'sell-out s', 'losers', 'commits/s', 'WAL MB/s'],
      ...bySegments.map((p, i) => [
        String(o.segmentList[i]),
        num(p.sellPerS),
        p.sellLimitedBy,
        ...[p.sellOutS, p.losers, p.commitsPerS, p.walMBps].map(num),
      ]),
    ]),
    '',
    `Throughput cross-check: one process gave ${num(m.refusalsPerSProcess)} refusals/s here; ${num(plans[0].arrivalPerS)}/s of them would take ${num(Math.ceil(plans[0].arrivalPerS / m.refusalsPerSProcess))} such processes.`,
  ].join('\n');
}

// ---- command line ----

const FLAGS = {
  results: value('FILE', 'benchmark report to read (default bench/results/latest.json)'),
  buyers: value('N', 'buyers (default 1000000)'),
  units: value('N', 'units on sale (default 10000)'),
  seconds: value('S', 'the buyers arrive evenly within this time (default 1)'),
  'requests-per-buyer': value('N', 'requests each buyer sends (default 1; retries and refreshes multiply it)'),
  segments: value('N', "the product's segments (default 20)"),
  'segment-list': value('LIST', 'segment counts of the hot-segment table (default 1,20,100,500)'),
  batch: value('group|one', "orders' costs with group commit or ORDER_BATCH_MAX=1 (default group)"),
  'single-redis': toggle('one Redis instead of a Redis Cluster (the order entry is then one call, not two)'),
  ...(Object.fromEntries(
    Object.values(CAPACITY_FLAGS).map(([flag, arg, dflt, , , help]) => [
      flag,
      value(arg, `${help} (assumed, default ${dflt})`),
    ]),
  ) as Record<(typeof CAPACITY_FLAGS)[keyof Capacity][0], ReturnType<typeof value>>),
  help: HELP,
} satisfies Record<string, Flag>;

const helpText = () =>
  usageText(
    'npm run scaling -- [flags]      (or: node dist/bench/scaling-model.js [flags] after npm run bench:build)',
    FLAGS,
    28,
  );

export function parseModelArgs(argv: string[], root = projectRoot(__dirname)) {
  const v = readFlags(argv, FLAGS, ModelInputError);
  const n = (flag: keyof typeof FLAGS, x: string | undefined, dflt: number, min: number, max = Infinity) => {
    if (x === undefined) return dflt;
    const y = Number(x);
    if (x.trim() === '' || !Number.isFinite(y) || y < min || y > max)
      throw new ModelInputError(
        `--${flag}: expected a number from ${min}${max < Infinity ? ` to ${max}` : ''}, got "${x}"`,
      );
    return y;
  };
  const batch = (['group', 'one'] as const).find((b) => b === (v.batch ?? 'group'));
  if (!batch) throw new ModelInputError(`--batch: expected group or one, got "${v.batch}"`);
  const segmentList = (v['segment-list'] ?? '1,20,100,500').split(',').map((x) => n('segment-list', x, 0, 1));
  return {
    help: v.help,
    results: v.results ?? join(root, 'bench', 'results', 'latest.json'),
    sale: {
      buyers: n('buyers', v.buyers, 1_000_000, 1),
      units: n('units', v.units, 10_000, 1),
      seconds: n('seconds', v.seconds, 1, 0.001),
      requestsPerBuyer: n('requests-per-buyer', v['requests-per-buyer'], 1, 1),
      segments: n('segments', v.segments, 20, 1),
    },
    capacity: capacityOf(([flag, , dflt, min, max]) => n(flag, v[flag], dflt, min, max)),
    batch,
    cluster: !v['single-redis'],
    segmentList,
  };
}

/**
 * What `sale.buyers` joins to one product's waiting room within `sale.seconds` take, from the costs
 * the waiting-room benchmark measured (bench/waiting-room.ts, bench/intake.ts): service cores for
 * the joins, their polls and the drawn orders; PostgreSQL's CPU and WAL for the tickets, in hosts
 * (the tickets partitioned by user over them, docs/scaling.md); the seals, one transaction per
 * bucket per host. No row or lock is taken by every join, so the first limit is the resource one
 * PostgreSQL host runs out of first, and it scales out by adding hosts.
 */
export function joinPlan(q: QueueReport, o: Pick<ModelOptions, 'sale' | 'capacity'>) {
  const cap = o.capacity;
  const perS = o.sale.buyers / o.sale.seconds;
  const { cpuUs, redisCommands, pollCpuUs } = joinCosts(q);
  const serviceCores = cpuUs === null ? null : (perS * cpuUs) / 1e6 / cap.processUtil;
  // The crowd then waits, nearly all of it behind the units left: a poll each BEHIND_UNITS_POLL_S seconds.
  const pollsPerS = o.sale.buyers / BEHIND_UNITS_POLL_S;
  const pollCores = pollCpuUs === null ? null : (pollsPerS * pollCpuUs) / 1e6 / cap.processUtil;
  const b = q.intake?.buckets;
  const drawCores = b?.drawUsPerTicket == null ? null : (perS * b.drawUsPerTicket) / 1e6 / cap.processUtil;
  const pgCores = b?.pgCpuUsPerJoin == null ? null : (perS * b.pgCpuUsPerJoin) / 1e6;
  const walMBps = b?.walBytesPerJoin == null ? null : (perS * b.walBytesPerJoin) / 1e6;
  // One seal at a time per product: the share of one PostgreSQL session's time, on one host.
  const sealShare = b?.sealUsPerJoin == null ? null : (perS * b.sealUsPerJoin) / 1e6;
  const processes = [serviceCores, pollCores, drawCores].every((c) => c !== null)
    ? Math.ceil((serviceCores as number) + (pollCores as number) + (drawCores as number))
    : null;
  // Every process loads every drawn order once: 8 bytes a ticket (from replicas past one host's network).
  const orderReadsMBps = processes === null ? null : (processes * 8 * perS) / 1e6;
  // What one PostgreSQL host would carry, each as a share of what it sustains.
  const onOneHost: Array<[string, number | null]> = [
    ["one PostgreSQL host's WAL", walMBps === null ? null : walMBps / cap.walMBps],
    ["one PostgreSQL host's CPU", pgCores === null ? null : pgCores / (cap.pgCores * cap.pgUtil)],
    ["the product's seals in one PostgreSQL session", sealShare === null ? null : sealShare / cap.pgUtil],
  ];
  const known = onOneHost.filter((x): x is [string, number] => x[1] !== null).sort((x, y) => y[1] - x[1]);
  const hosts = known.length === 0 ? null : Math.max(1, Math.ceil(known[0][1]));
  const oldCeiling = q.intake ? Math.max(...q.intake.counterRow.runs.map((r) => r.joinsPerS)) : null;
  return {
    joinsPerS: perS,
    serviceCores,
    pollsPerS,
    pollCores,
    drawCores,
    processes,
    redisCommandsPerS: perS * redisCommands,
    pgCores,
    walMBps,
    sealShare,
    orderReadsMBps,
    /** PostgreSQL hosts (partitions of the tickets) the sale takes at the planned utilisation. */
    hosts,
    /** The counter row's ceiling as measured beside (its best joins/s over the writer counts). */
    counterRowCeilingPerS: oldCeiling,
    fits: processes === null ? null : processes <= 100,
    firstLimit:
      known.length === 0
        ? 'service cores'
        : `${known[0][0]} (${known[0][1].toFixed(2)} of it at one host: ${hosts} host${hosts === 1 ? '' : 's'})`,
  };
}

/** Service CPU and Redis commands per join (of new users at full speed where the report has them, else the sale's joining), service CPU per poll. */
const joinCosts = (q: QueueReport) => ({
  cpuUs: q.capacity?.join.cpuUs ?? q.withRoom.serviceCpuUsPerJoin,
  redisCommands: q.capacity?.join.redisCommands ?? q.withRoom.redisCommandsPerJoin,
  pollCpuUs: q.capacity?.poll.cpuUs ?? null,
});

export function renderJoins(q: QueueReport, o: Pick<ModelOptions, 'sale' | 'capacity'>): string {
  const p = joinPlan(q, o);
  const c = joinCosts(q);
  const b = q.intake?.buckets;
  return [
    '',
    `## The waiting room: ${num(o.sale.buyers)} joins of one product within ${o.sale.seconds} s (costs from bench/results/queue.json, ${q.startedAt})`,
    '',
    ...table('', [
      ['input', 'value', 'source'],
      ['service CPU per join', `${num(c.cpuUs)} µs`, 'measured (bench:queue, joins at full speed)'],
      ['service CPU per poll of a waiting ticket', `${num(c.pollCpuUs)} µs`, 'measured (bench:queue)'],
      ['Redis commands per join', num(c.redisCommands), 'measured'],
      [
        'service CPU to draw a ticket into its bucket (HMAC, sort)',
        `${num(b?.drawUsPerTicket)} µs`,
        'measured (bench:queue)',
      ],
      ['PostgreSQL CPU per ticket written', `${num(b?.pgCpuUsPerJoin)} µs`, 'measured (bench:queue, one writer)'],
      ['WAL per ticket written', `${num(b?.walBytesPerJoin)} bytes`, 'measured (bench:queue, one writer)'],
      [
        'PostgreSQL time in the seals per ticket sealed',
        `${num(b?.sealUsPerJoin)} µs`,
        'measured (pg_stat_statements)',
      ],
      [
        "one product's joins/s through a counter row, for comparison",
        num(p.counterRowCeilingPerS),
        'measured (bench:queue, best of 1, 2, 4 writers)',
      ],
      ['process utilisation', String(o.capacity.processUtil), 'assumed'],
      [
        'a PostgreSQL host: cores, utilisation, WAL MB/s',
        `${o.capacity.pgCores}, ${o.capacity.pgUtil}, ${o.capacity.walMBps}`,
        'assumed',
      ],
    ]),
    '',
    ...table('', [
      ['needs', 'value'],
      ['joins per second', num(p.joinsPerS)],
      ['service cores for the joins', num(p.serviceCores)],
      [
        `service cores for the polls while the crowd waits (one each ${BEHIND_UNITS_POLL_S} s: ${num(p.pollsPerS)}/s)`,
        num(p.pollCores),
      ],
      ['service cores to draw the buckets (spread: one process per bucket)', num(p.drawCores)],
      ['service processes in all', num(p.processes)],
      ['on at most 100 service cores', p.fits === null ? '-' : p.fits ? 'yes' : 'no'],
      ['Redis commands per second', num(p.redisCommandsPerS)],
      ['PostgreSQL CPU, cores', num(p.pgCores)],
      ['WAL, MB/s', num(p.walMBps)],
      ["the product's seals, share of one session's time", num(p.sealShare)],
      ['drawn orders read by the processes, MB/s', num(p.orderReadsMBps)],
      ['PostgreSQL hosts (the tickets partitioned by user)', num(p.hosts)],
      ['first limit', p.firstLimit],
    ]),
    '',
    'The joins touch no Redis, and no row or lock that every join of the product takes: each writes its',
    "ticket under its bucket's shared lock, so they spread over service processes and PostgreSQL sessions.",
    "What one host runs out of first is named above; past it, the product's tickets are partitioned by user",
    'over more hosts, each sealed in the same transaction as the others (docs/scaling.md).',
  ].join('\n');
}

function main(): number {
  try {
    const o = parseModelArgs(process.argv.slice(2));
    if (o.help) {
      process.stdout.write(helpText());
      return 0;
    }
    const report = JSON.parse(readFileSync(o.results, 'utf8')) as BenchmarkReport;
    process.stdout.write(`${render(report, o)}\n`);
    // The waiting room's costs, when its benchmark left them beside the report.
    const queueFile = join(dirname(o.results), 'queue.json');
    if (existsSync(queueFile))
      process.stdout.write(`${renderJoins(JSON.parse(readFileSync(queueFile, 'utf8')) as QueueReport, o)}\n`);
    else process.stdout.write(`\n(no ${queueFile}: run npm run bench:queue for the waiting room's part)\n`);
    return 0;
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code !== 'ENOENT' && !(err instanceof ModelInputError)) throw err;
    process.stderr.write(
      e.code === 'ENOENT'
        ? `no benchmark report at ${e.path}: run npm run bench first, or name one with --results\n`
        : `${e.message}\n\n${helpText()}`,
    );
    return 2;
  }
}

if (require.main === module) process.exit(main());
