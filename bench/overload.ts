// `npm run bench:overload` (bench/README.md): the service under a crowd larger than the machine.
// Part one: the capacity of a sale's mix of calls (closed loop), then open-loop arrivals at fixed
// multiples of it (0.5x to 8x), each step a fresh product that sells out mid-step, with CPU burners
// beside the service; per step: goodput (answers that are not 503), what was shed by class, p50/p99
// of the answers, PostgreSQL statements and Redis commands per answer, sold-out refusals that read
// PostgreSQL, event-loop delay and memory. Part two: the crowd (50,000 buyers for 1,000 units on 500
// connections, no waiting room) against GET /health/live of the same start, on a quiet machine and
// beside burners. One service start (WORKERS=2) per part and machine load.
import { ChildProcess, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { costDeltas, CostSnapshot } from './costs';
import { Latency, nearestRank, runLoad } from './load';
import { Call, closedLoop, goodAnswers, LoadOutcome, openLoop } from './open-loop';
import { createProductViaApi } from './scenarios';
import { capCpu } from './cpu-cap';
import { childrenOf, ServiceProcess } from '../harness/launcher';
import { BENCH_SHOP_TOKEN, RssSampler } from './service';
import { machine, reportMain, Servers, withServers } from './standalone';

const USAGE = `npm run bench:overload -- [--steps 0.5,1,2,4,8,16] [--step-s 6] [--burners 1] [--service-cores 1] [--crowd-burners 0,2|none] [--shed off] [--out DIR]

  --steps          multiples of the measured capacity offered in turn (open loop)
  --step-s         seconds of load per step (default 6)
  --burners        CPU burners beside the service during part one (default 1)
  --service-cores  cap the service's processes at this many cores in part one (a cgroup; root only):
                   one load generator on the same cores cannot outpace a service that has them all
  --crowd-burners  machine loads of part two, as burner counts (default 0,2; none: part one only)
  --shed LEVELS    SHED_LAG_MS of the service (default: its own default; off: no shedding, to compare)`;

const FLAGS = ['steps', 'step-s', 'burners', 'service-cores', 'crowd-burners', 'shed'] as const;

/** Connections the crowd may open in part one: far more than the service takes at once. */
const CONNECTIONS = 1000;
const TIMEOUT_MS = 5000;
/** Shares of the mix, out of 20 calls: 17 new orders, 1 join, 1 poll of a waiting ticket, 1 payment. */
const MIX: Array<'order' | 'join' | 'poll' | 'pay'> = [...Array<'order'>(17).fill('order'), 'join', 'poll', 'pay'];

type Step = Awaited<ReturnType<typeof runStep>>;
type CrowdRow = Awaited<ReturnType<typeof runCrowd>>;

export interface OverloadReport {
  startedAt: string;
  machine: ReturnType<typeof machine>;
  stepS: number;
  burners: number;
  /** The service's CPU cap in part one, in cores; null: none. */
  serviceCores: number | null;
  shed: string;
  capacityPerS: number;
  steps: Step[];
  crowd: CrowdRow[];
  targets: Array<{ name: string; measured: number; target: number; sense: '>=' | '<='; ok: boolean }>;
}

function burn(n: number): ChildProcess[] {
  return Array.from({ length: n }, () => spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }));
}

/** A metric's value on a /metrics page (summed over the label sets that carry `labels`), 0 when absent. */
export function metricIn(text: string, name: string, labels: Record<string, string> = {}): number {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (m?.[1] !== name) continue;
    const set = m[2]?.split(',') ?? [];
    if (wanted.every((w) => set.includes(w))) sum += Number(m[3]);
  }
  return sum;
}

const stopBurners = (bs: ChildProcess[]) => bs.forEach((b) => b.kill('SIGKILL'));

async function metricsText(url: string): Promise<string> {
  const res = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(10_000) });
  return res.text();
}

/** The service's mean event-loop delay (the slowest worker's, ms), every 250 ms until stopped. */
function delaySampler(url: string) {
  const samples: number[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      await metricsText(url)
        .then((t) => samples.push(metricIn(t, 'flashsale_event_loop_delay_seconds') * 1000))
        .catch(() => undefined);
      await sleep(250);
    }
  })();
  return async () => {
    running = false;
    await loop;
    const sorted = [...samples].sort((a, b) => a - b);
    return { p99Ms: sorted.length ? nearestRank(sorted, 0.99) : null, maxMs: sorted.at(-1) ?? null };
  };
}

interface Fixtures {
  svc: ServiceProcess;
  servers: Servers;
  room: number;
  tickets: string[];
}

async function post(url: string, path: string, body: unknown, token?: string) {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** Reserved orders of a product of their own, for the payments of a step. */
async function ordersToPay(f: Fixtures, tag: string, n: number): Promise<Array<[id: number, userId: string]>> {
  const product = await createProductViaApi(f.svc.url, f.servers.adminToken, {
    name: `overload ${tag} payments`,
    stock: n,
    segments: 8,
  });
  const ids: Array<[number, string]> = [];
  for (let i = 0; i < n; i += 20) {
    const made = await Promise.all(
      Array.from({ length: Math.min(20, n - i) }, (_, j) =>
        post(f.svc.url, '/orders', { userId: `${tag}-payer-${i + j}`, productId: product }),
      ),
    );
    for (const m of made) if (m.status === 201) ids.push([m.body.id as number, m.body.userId as string]);
  }
  return ids;
}

/** The n-th call of a step's mix. */
function mixOf(f: Fixtures, tag: string, product: number, payable: Array<[number, string]>) {
  return (n: number): Call => {
    const kind = MIX[n % MIX.length];
    switch (kind) {
      case 'order':
        return {
          kind,
          method: 'POST',
          path: '/orders',
          body: JSON.stringify({ userId: `${tag}-${n}`, productId: product }),
        };
      case 'join':
        return {
          kind,
          method: 'POST',
          path: `/products/${f.room}/queue`,
          body: JSON.stringify({ userId: `${tag}-${n}` }),
        };
      case 'poll':
        return { kind, method: 'GET', path: `/products/${f.room}/queue/${f.tickets[n % f.tickets.length]}` };
      case 'pay': {
        const [id, userId] = payable[Math.floor(n / MIX.length) % payable.length];
        return {
          kind,
          method: 'POST',
          path: `/orders/${id}/pay`,
          body: JSON.stringify({ userId }),
          headers: { authorization: `Bearer ${BENCH_SHOP_TOKEN}` },
        };
      }
    }
  };
}

/**
 * PostgreSQL statements that answer SOLD_OUT on the order path: the sold-out board's read and the
 * buyer's order by key, by pg_stat_statements' texts. (The layout read before a SOLD_OUT is left
 * out: orders that then sell from another segment make it too, as the last units go.)
 */
async function soldOutStatements(servers: Servers): Promise<number> {
  const { rows } = await servers.db.query<{ n: string }>(
    `SELECT coalesce(sum(s.calls), 0)::text AS n FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
      WHERE d.datname = current_database()
        AND (s.query LIKE '%WITH seg AS%' OR s.query LIKE '%FROM orders WHERE product_id = $1 AND user_id = $2%')`,
  );
  return Number(rows[0].n);
}

/** Counters of /metrics the report reads, summed over workers. */
function counters(text: string) {
  return {
    soldOut: metricIn(text, 'flashsale_orders_total', { outcome: 'SOLD_OUT' }),
    soldOutFromMemory: metricIn(text, 'flashsale_in_process_refusals_total', { code: 'SOLD_OUT' }),
    shedJoin: metricIn(text, 'flashsale_shed_total', { class: 'join' }),
    shedOrder: metricIn(text, 'flashsale_shed_total', { class: 'order' }),
    shedSettle: metricIn(text, 'flashsale_shed_total', { class: 'settle' }),
  };
}

const allLatency = (r: LoadOutcome): Latency | null => {
  // The slowest class's percentiles stand for the step: a p99 over classes weighted by their shares
  // would hide the classes that are shed least and so wait most.
  const ls = Object.values(r.byKind)
    .map((k) => k.latency)
    .filter((l): l is Latency => l !== null);
  if (ls.length === 0) return null;
  return {
    p50: Math.max(...ls.map((l) => l.p50)),
    p99: Math.max(...ls.map((l) => l.p99)),
    max: Math.max(...ls.map((l) => l.max)),
    mean: Math.max(...ls.map((l) => l.mean)),
  };
};

async function runStep(f: Fixtures, multiple: number, capacityPerS: number, stepS: number, log: (l: string) => void) {
  const tag = `x${multiple}`;
  const ratePerS = Math.round(multiple * capacityPerS);
  // Sells out at about 40% of the step when the service keeps up with its capacity.
  const stock = Math.max(20, Math.round(capacityPerS * stepS * 0.4 * (17 / 20)));
  const product = await createProductViaApi(f.svc.url, f.servers.adminToken, {
    name: `overload ${tag}`,
    stock,
    segments: 20,
  });
  const payable = await ordersToPay(f, tag, 200);
  const before = counters(await metricsText(f.svc.url));
  const soldOutReadsBefore = await soldOutStatements(f.servers);
  const costsBefore: CostSnapshot = await f.servers.probe.snapshot(f.svc.pid);
  const rss = new RssSampler(f.svc.pid);
  const delays = delaySampler(f.svc.url);
  log(`step ${multiple}x: ${ratePerS} calls/s for ${stepS} s, product of ${stock} units`);
  const r = await openLoop({
    url: f.svc.url,
    ratePerS,
    durationS: stepS,
    connections: CONNECTIONS,
    timeoutMs: TIMEOUT_MS,
    call: mixOf(f, tag, product, payable),
  });
  const delay = await delays();
  const peaks = rss.stop();
  await sleep(300);
  const costsAfter = await f.servers.probe.snapshot(f.svc.pid);
  const after = counters(await metricsText(f.svc.url));
  const soldOutReads = (await soldOutStatements(f.servers)) - soldOutReadsBefore;
  const answers = goodAnswers(r);
  const costs = costDeltas(costsBefore, costsAfter, 'answer', answers);
  const soldOut = after.soldOut - before.soldOut;
  const fromMemory = after.soldOutFromMemory - before.soldOutFromMemory;
  const step = {
    multiple,
    offeredPerS: ratePerS,
    sentPerS: r.sentPerS,
    elapsedS: r.elapsedS,
    byKind: r.byKind,
    // Answers that came after the step's end still count, over the time they took.
    goodputPerS: answers / Math.max(stepS, r.elapsedS),
    latencyMs: allLatency(r),
    shed: {
      join: after.shedJoin - before.shedJoin,
      order: after.shedOrder - before.shedOrder,
      settle: after.shedSettle - before.shedSettle,
    },
    soldOutRefusals: soldOut,
    /** SOLD_OUT answers that took the order path (the rest came from the board, in memory). */
    soldOutOnOrderPath: soldOut - fromMemory,
    /** PostgreSQL statements that those answers ran (the board's shared reads among them). */
    soldOutStatements: soldOutReads,
    pgStatementsPerAnswer: costs.perUnit.pgStatements,
    redisCommandsPerAnswer: costs.perUnit.redisCommands,
    serviceCpuUsPerAnswer: costs.perUnit.targetCpuUs,
    eventLoopDelayMs: delay,
    peakRssMb: peaks.reduce((s, p) => s + p.peakRssMb, 0),
  };
  log(
    `  goodput ${step.goodputPerS.toFixed(0)}/s, shed ${JSON.stringify(step.shed)}, p99 ${step.latencyMs?.p99.toFixed(0)} ms, ` +
      `sold-out refusals ${soldOut} (${step.soldOutOnOrderPath} on the order path, ${soldOutReads} statements), loop delay p99 ${delay.p99Ms?.toFixed(0)} ms`,
  );
  return step;
}

async function partOne(
  servers: Servers,
  o: { steps: number[]; stepS: number; burners: number; serviceCores: number | null; shed: string },
  log: (l: string) => void,
) {
  const svc = await servers.start({
    WORKERS: '2',
    MAX_CONNECTIONS_PER_IP: '0',
    // The service's own defaults, unless --shed gives levels (or off).
    SHED_LAG_MS: o.shed === 'on' ? '' : o.shed,
    SHED_ORDERS_IN_FLIGHT: o.shed === 'off' ? '0' : '',
  });
  const room = await createProductViaApi(svc.url, servers.adminToken, {
    name: 'overload room',
    stock: 1_000_000,
    segments: 20,
    waitingRoom: true,
  });
  const tickets: string[] = [];
  for (let i = 0; i < 200; i += 20) {
    const joined = await Promise.all(
      Array.from({ length: 20 }, (_, j) => post(svc.url, `/products/${room}/queue`, { userId: `waiting-${i + j}` })),
    );
    for (const j of joined) tickets.push(j.body.id as string);
  }
  const f: Fixtures = { svc, servers, room, tickets };
  const burners = burn(o.burners);
  const cap =
    o.serviceCores === null ? null : capCpu([svc.pid, ...childrenOf(svc.pid)], o.serviceCores, `overload-${svc.pid}`);
  try {
    // Warm-up and capacity: the same mix on a product that does not sell out, as many callers as connections.
    const big = await createProductViaApi(svc.url, servers.adminToken, {
      name: 'overload capacity',
      stock: 10_000_000,
      segments: 20,
    });
    const payable = await ordersToPay(f, 'capacity', 200);
    await closedLoop({
      url: svc.url,
      concurrency: 200,
      durationS: 3,
      connections: 200,
      timeoutMs: TIMEOUT_MS,
      call: mixOf(f, 'warm', big, payable),
    });
    const cap = await closedLoop({
      url: svc.url,
      concurrency: 200,
      durationS: o.stepS,
      connections: 200,
      timeoutMs: TIMEOUT_MS,
      call: mixOf(f, 'cap', big, payable),
    });
    const capacityPerS = goodAnswers(cap) / cap.elapsedS;
    log(`capacity of the mix (closed loop, 200 callers): ${capacityPerS.toFixed(0)} answers/s`);
    const steps: Step[] = [];
    for (const m of o.steps) steps.push(await runStep(f, m, capacityPerS, o.stepS, log));
    return { capacityPerS, steps };
  } finally {
    stopBurners(burners);
    cap?.release();
  }
}

async function runCrowd(servers: Servers, burnerCount: number, log: (l: string) => void) {
  const svc = await servers.start({
    WORKERS: '2',
    MAX_CONNECTIONS_PER_IP: '0',
    SHED_LAG_MS: '',
    SHED_ORDERS_IN_FLIGHT: '',
  });
  const burners = burn(burnerCount);
  try {
    const health = await runLoad({
      url: svc.url,
      get: '/health/live',
      okStatus: 200,
      connections: 500,
      durationS: 5,
      timeoutS: 20,
      label: 'health',
    });
    const product = await createProductViaApi(svc.url, servers.adminToken, {
      name: 'overload crowd',
      stock: 1000,
      segments: 20,
    });
    const before = await servers.probe.snapshot(svc.pid);
    const crowd = await runLoad({
      url: svc.url,
      productId: product,
      userPrefix: `crowd${burnerCount}-`,
      connections: 500,
      amount: 50_000,
      timeoutS: 30,
      label: 'crowd',
      okStatus: 201,
    });
    const after = await servers.probe.snapshot(svc.pid);
    const costs = costDeltas(before, after, 'answer', crowd.responses);
    const healthPerS = health.responses / health.elapsedS;
    const answered = crowd.responses - (crowd.statusCounts['503'] ?? 0);
    const answersPerS = answered / crowd.elapsedS;
    const row = {
      burners: burnerCount,
      healthPerS,
      answersPerS,
      ratio: answersPerS / healthPerS,
      statuses: crowd.statusCounts,
      allAnsweredInS: crowd.elapsedS,
      pgStatementsPerBuyer: costs.perUnit.pgStatements,
    };
    log(
      `crowd beside ${burnerCount} burners: ${answersPerS.toFixed(0)} answers/s, GET /health/live ${healthPerS.toFixed(0)}/s (${row.ratio.toFixed(2)}x)`,
    );
    return row;
  } finally {
    stopBurners(burners);
    await svc.stop();
  }
}

const list = (v: string | undefined, dflt: number[]) => (v ? v.split(',').map(Number) : dflt);

export async function runOverload(flags: Partial<Record<(typeof FLAGS)[number], string>>): Promise<OverloadReport> {
  const log = (l: string) => process.stderr.write(`${l}\n`);
  const stepS = Number(flags['step-s'] ?? 6);
  const burners = Number(flags.burners ?? 1);
  const serviceCores = flags['service-cores'] === undefined ? null : Number(flags['service-cores']);
  const steps = list(flags.steps, [0.5, 1, 2, 4, 8, 16]);
  const shed = flags.shed ?? 'on';
  return withServers('overload', log, async (servers) => {
    const one = await partOne(servers, { steps, stepS, burners, serviceCores, shed }, log);
    const crowd: CrowdRow[] = [];
    if (flags['crowd-burners'] !== 'none')
      for (const b of list(flags['crowd-burners'], [0, 2])) crowd.push(await runCrowd(servers, b, log));
    const report: OverloadReport = {
      startedAt: new Date().toISOString(),
      machine: machine(),
      stepS,
      burners,
      serviceCores,
      shed,
      ...one,
      crowd,
      targets: [],
    };
    report.targets = overloadTargets(report);
    return report;
  });
}

export function overloadTargets(r: Pick<OverloadReport, 'steps' | 'crowd'>) {
  const t = (name: string, measured: number, target: number, sense: '>=' | '<=' = '>=') => ({
    name,
    measured,
    target,
    sense,
    ok: sense === '>=' ? measured >= target : measured <= target,
  });
  const peak = Math.max(...r.steps.map((s) => s.goodputPerS));
  // The targets are set at 8x (the highest step when the run stopped below it).
  const top = r.steps.find((s) => s.multiple === 8) ?? r.steps.at(-1);
  const low = r.steps[0];
  const worstReads = Math.max(...r.steps.map((s) => (s.soldOutRefusals ? s.soldOutStatements / s.soldOutRefusals : 0)));
  return [
    t(`goodput at ${top?.multiple}x / peak goodput`, (top?.goodputPerS ?? NaN) / peak, 0.9),
    t('PostgreSQL statements per sold-out refusal (the worst step)', worstReads, 0.01, '<='),
    t(
      `p99 of answers at ${top?.multiple}x / at ${low?.multiple}x`,
      (top?.latencyMs?.p99 ?? NaN) / (low?.latencyMs?.p99 ?? NaN),
      5,
      '<=',
    ),
    ...r.crowd.map((c) => t(`crowd answers/s / GET /health/live beside ${c.burners} burners`, c.ratio, 0.3)),
  ];
}

const f0 = (n: number | null | undefined, d = 0) => (n == null || !Number.isFinite(n) ? '-' : n.toFixed(d));

export function renderOverload(r: OverloadReport): string {
  const statuses = (s: Record<string, number>) =>
    Object.entries(s)
      .map(([k, n]) => `${k}: ${n}`)
      .join(', ');
  return [
    `# Overload: a crowd larger than the machine`,
    '',
    `${r.machine.cores} cores, ${r.machine.memoryGb} GB, Node ${r.machine.node}; the service as WORKERS=2, shedding ${r.shed}; the load generator, PostgreSQL and Redis on the same cores. ` +
      `Part one beside ${r.burners} CPU burner(s)${r.serviceCores === null ? '' : `, the service's processes capped at ${r.serviceCores} core(s) (a cgroup) so that the load generator can outpace them`}: the capacity is the mix's answers/s in a closed loop (200 callers); each step then offers a multiple of it in an open loop for ${r.stepS} s ` +
      `(requests sent when due over up to ${CONNECTIONS} connections, latency counted from when each was due, ${TIMEOUT_MS / 1000} s timeout), ` +
      'the mix being 17 new orders of a product that sells out mid-step, 1 join, 1 poll of a waiting ticket and 1 payment in 20. Goodput: answers that are not 503, per second of the step.',
    '',
    `Capacity: ${f0(r.capacityPerS)} answers/s.`,
    '',
    '| offered | calls/s (sent) | goodput/s | / peak | shed join / order / settle | other 503 | timeouts | p50 ms | p99 ms | sold-out refusals (on the order path) | their PG statements / refusal | PG statements / answer | Redis commands / answer | loop delay p99 / max ms | RSS MB |',
    '|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
    ...r.steps.map((s) => {
      const peak = Math.max(...r.steps.map((x) => x.goodputPerS));
      const timeouts = Object.values(s.byKind).reduce(
        (n, k) => n + (k.statuses.timeout ?? 0) + (k.statuses.error ?? 0),
        0,
      );
      return `| ${s.multiple}x | ${s.offeredPerS} | ${f0(s.goodputPerS)} | ${f0(s.goodputPerS / peak, 2)} | ${s.shed.join} / ${s.shed.order} / ${s.shed.settle} | ${timeouts} | ${f0(s.latencyMs?.p50, 1)} | ${f0(s.latencyMs?.p99, 1)} | ${s.soldOutRefusals} (${s.soldOutOnOrderPath}) | ${f0(s.pgStatementsPerAnswer, 3)} | ${f0(s.redisCommandsPerAnswer, 2)} | ${f0(s.eventLoopDelayMs.p99Ms)} / ${f0(s.eventLoopDelayMs.maxMs)} | ${f0(s.peakRssMb)} |`;
    }),
    '',
    'Answers by class and status, per step:',
    '',
    ...r.steps.map(
      (s) =>
        `- ${s.multiple}x: ${Object.entries(s.byKind)
          .map(([k, c]) => `${k} (${c.sent} sent) ${statuses(c.statuses)}`)
          .join('; ')}`,
    ),
    '',
    ...(r.crowd.length
      ? [
          'Part two, the crowd: 50,000 buyers (one order each) for 1,000 units in 20 segments on 500 connections, no waiting room, against GET /health/live of the same start (500 connections, 5 s).',
          '',
          '| burners | GET /health/live /s | crowd answers/s | ratio | all answered in s | PG statements / buyer | answers |',
          '|--:|--:|--:|--:|--:|--:|---|',
          ...r.crowd.map(
            (c) =>
              `| ${c.burners} | ${f0(c.healthPerS)} | ${f0(c.answersPerS)} | ${f0(c.ratio, 2)} | ${f0(c.allAnsweredInS, 1)} | ${f0(c.pgStatementsPerBuyer, 3)} | ${statuses(c.statuses)} |`,
          ),
          '',
        ]
      : []),
    '| target | measured | wanted | |',
    '|---|--:|--:|---|',
    ...r.targets.map(
      (t) => `| ${t.name} | ${f0(t.measured, 3)} | ${t.sense} ${t.target} | ${t.ok ? 'pass' : 'MISSED'} |`,
    ),
    '',
  ].join('\n');
}

if (require.main === module) reportMain('overload', [FLAGS, USAGE], runOverload, renderOverload);
