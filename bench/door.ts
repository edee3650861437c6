// `npm run bench:door` (bench/README.md): what a "no" costs (410, 409, 429), orders/s with buyer
// identity on and off, and the memory of a sold-out product's holders, each beside GET /health/live
// of the same process; one service start per configuration, one after the other.
import { setTimeout as sleep } from 'node:timers/promises';
import { SignJWT } from 'jose';
import type { ServiceProcess } from '../harness/launcher';
import { costDeltas } from './costs';
import { addCounts, LoadSpec, mergeLatency, runLoad } from './load';
import { createProductViaApi } from './scenarios';
import { SERVICE_HEAP_MB } from './service';
import { machine, reportMain, Servers, splitFlags, withServers } from './standalone';
import type { NewProduct } from './types';

const JWT_SECRET = 'bench-door-buyer-secret-0123456789abcdef';

export type DoorRow = Awaited<ReturnType<typeof measure>>;

/** Every row: the start that measures it (plain: identity off, no limits; identity: HS256; limited: RATE_LIMIT_USER=1), what it is, and the answer that counts. */
const ROWS: Record<string, ['plain' | 'identity' | 'limited', string, number]> = {
  'health-live-plain': ['plain', 'GET /health/live', 200],
  'sold-out-410': ['plain', 'POST /orders, sold-out product, distinct buyers (a body per request)', 410],
  'already-ordered-409': ['plain', 'POST /orders, sold-out product, its 20 holders again (20 fixed bodies)', 409],
  'orders-plain': [
    'plain',
    'POST /orders, distinct buyers, 20 segments, identity off (a token header sent and ignored)',
    201,
  ],
  'orders-hs256': ['identity', 'POST /orders, distinct buyers each with an HS256 token, 20 segments', 201],
  'health-live-limited': ['limited', 'GET /health/live', 200],
  'rate-limited-429': ['limited', 'POST /orders, one user over RATE_LIMIT_USER=1 (one fixed body)', 429],
};

/** The targets of the door, as ratios of rows measured in this run, each at least (>=) or at most (<=) its target. */
export function doorTargets(rows: DoorRow[]) {
  const row = (id: string) => rows.find((r) => r.id === id);
  const rate = (id: string) => row(id)?.perSec ?? NaN;
  const per = (id: string, key: 'pgStatements' | 'redisCommands' | 'targetCpuUs') => row(id)?.costs.perUnit[key] ?? NaN;
  const t = (name: string, measured: number, target: number, sense: '>=' | '<=' = '>=') => ({
    name,
    measured,
    target,
    sense,
    ok: sense === '>=' ? measured >= target : measured <= target,
  });
  // One row's answers/s over another's (by default GET /health/live of the same start); CPU the other way round.
  const floor = (id: string) => `health-live-${ROWS[id][0]}`;
  const vs = (id: string, other = floor(id)) => rate(id) / rate(other);
  const cpuVs = (id: string) => per(floor(id), 'targetCpuUs') / per(id, 'targetCpuUs');
  return [
    t('410 to distinct buyers / GET /health/live (same process)', vs('sold-out-410'), 0.7),
    t('service CPU per GET /health/live / per 410 (same process)', cpuVs('sold-out-410'), 0.7),
    t('409 to holders asking again / GET /health/live (same process)', vs('already-ordered-409'), 0.5),
    t('PostgreSQL statements per 410', per('sold-out-410', 'pgStatements'), 0.01, '<='),
    t('Redis commands per 410', per('sold-out-410', 'redisCommands'), 0.01, '<='),
    t('PostgreSQL statements per 409', per('already-ordered-409', 'pgStatements'), 0.01, '<='),
    t('Redis commands per 409', per('already-ordered-409', 'redisCommands'), 0.01, '<='),
    t('429 / GET /health/live (same process)', vs('rate-limited-429'), 0.7),
    t('service CPU per GET /health/live / per 429 (same process)', cpuVs('rate-limited-429'), 0.7),
    t('orders/s with HS256 identity / without', vs('orders-hs256', 'orders-plain'), 0.9),
  ];
}

const f = (n: number | null | undefined, digits = 0) => (n == null || !Number.isFinite(n) ? '-' : n.toFixed(digits));

export function renderDoor(r: DoorReport): string {
  const row = (x: DoorRow) => {
    const p = x.costs.perUnit;
    return `| ${x.id} | ${x.start} | ${x.what} | ${x.answers} | ${f(x.perSec)} | ${f(x.latencyMs?.p50, 1)} | ${f(x.latencyMs?.p99, 1)} | ${f(p.pgStatements, 3)} | ${f(p.redisCommands, 3)} | ${f(p.targetCpuUs)} |`;
  };
  return [
    `# The door: what a "no" costs (${r.startedAt})`,
    '',
    `${r.machine.cores} cores, ${r.machine.memoryGb} GB, Node ${r.machine.node}; ${r.connections} connections, ${r.durationS} s per row; one service process ` +
      `(WORKERS=1, --max-old-space-size=${SERVICE_HEAP_MB}) per start, started in turn; the load generator, PostgreSQL and Redis share the same cores. ` +
      'Rows compared by a target are measured interleaved (A, B, A, B, half the time each) in one process, or (orders with identity off and on) in alternating starts: off, on, off, on. ' +
      'Costs per answer: PostgreSQL statements from pg_stat_statements (read-only ones included; the sold-out board polls once per SOLD_OUT_STALE_MS / 4 whatever the load, and those polls are in), Redis commands from INFO commandstats, service CPU from /proc.',
    '',
    '| row | start | what | answers | answers/s | p50 ms | p99 ms | PG statements / answer | Redis commands / answer | service CPU µs / answer |',
    '|---|---|---|--:|--:|--:|--:|--:|--:|--:|',
    ...r.rows.map(row),
    '',
    '| target | measured | wanted | |',
    '|---|--:|--:|---|',
    ...r.targets.map(
      (t) => `| ${t.name} | ${f(t.measured, 3)} | ${t.sense} ${t.target} | ${t.ok ? 'pass' : 'MISSED'} |`,
    ),
    '',
    `Memory: a sold-out product with ${r.memory.holders} live orders, learnt by a process in ${f(r.memory.learnMs)} ms (one statement), ` +
      `took its heap from ${f(r.memory.heapBeforeMb, 1)} MB to ${f(r.memory.heapAfterMb, 1)} MB (V8 heap used as the service reports it, garbage included); ` +
      `the entry alone (a Map of ${r.memory.holders} user ids to order ids, between two forced collections in the benchmark's process) is ${f(r.memory.entryMb, 1)} MB.`,
    '',
  ].join('\n');
}

type Ctx = Servers & { durationS: number; connections: number; log: (line: string) => void };

async function measure(ctx: Ctx, svc: ServiceProcess, id: string, load: Partial<LoadSpec>) {
  const [start, what, okStatus] = ROWS[id];
  const before = await ctx.probe.snapshot(svc.pid);
  const result = await runLoad({
    url: svc.url,
    connections: ctx.connections,
    durationS: ctx.durationS,
    timeoutS: 20,
    label: id,
    okStatus,
    progress: ctx.log,
    ...load,
  });
  await sleep(200);
  const after = await ctx.probe.snapshot(svc.pid);
  const answers = result.responses;
  ctx.log(`${id}: ${JSON.stringify(result.statusCounts)} in ${result.elapsedS.toFixed(1)} s`);
  return {
    id,
    start,
    what,
    okStatus,
    answers,
    /** Seconds of load the row's answers took. */
    elapsedS: result.elapsedS,
    perSec: result.created / result.elapsedS,
    statusCounts: result.statusCounts,
    latencyMs: result.latency201,
    costs: costDeltas(before, after, 'answer', answers),
  };
}

/** Parts of one row measured at different times: answers and time add up; costs per answer are weighted by answers; p50 averaged, p99 the worst part's. */
export function merge(parts: DoorRow[]): DoorRow {
  const answers = parts.reduce((n, p) => n + p.answers, 0);
  const ok = parts.reduce((n, p) => n + (p.statusCounts[String(p.okStatus)] ?? 0), 0);
  const elapsedS = parts.reduce((n, p) => n + p.elapsedS, 0);
  const statusCounts = addCounts(...parts.map((p) => p.statusCounts));
  const weighted = (get: (p: DoorRow) => number | null | undefined): number | null => {
    if (parts.some((p) => get(p) == null)) return null;
    return answers === 0 ? 0 : parts.reduce((n, p) => n + (get(p) as number) * p.answers, 0) / answers;
  };
  const perUnit = {
    ...parts[0].costs.perUnit,
    pgStatements: weighted((p) => p.costs.perUnit.pgStatements),
    redisCommands: weighted((p) => p.costs.perUnit.redisCommands) ?? 0,
    redisScripts: weighted((p) => p.costs.perUnit.redisScripts) ?? 0,
    targetCpuUs: weighted((p) => p.costs.perUnit.targetCpuUs),
  };
  return {
    ...parts[0],
    answers,
    elapsedS,
    perSec: elapsedS > 0 ? ok / elapsedS : 0,
    statusCounts,
    latencyMs: mergeLatency(parts.map((p) => p.latencyMs)),
    costs: { ...parts[0].costs, units: answers, perUnit },
  };
}

async function metricValue(svc: ServiceProcess, name: string): Promise<number> {
  const lines = (await (await fetch(`${svc.url}/metrics`)).text()).split('\n');
  return lines.reduce((sum, l) => sum + (l.startsWith(name) ? Number(l.split(' ').pop()) : 0), 0);
}

async function order(svc: ServiceProcess, body: unknown): Promise<number> {
  const r = await fetch(`${svc.url}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  await r.arrayBuffer();
  return r.status;
}

/** Until the process answers the product's refusals from memory (the board learnt it). */
async function untilRefusedFromMemory(svc: ServiceProcess, productId: number, prefix: string): Promise<number> {
  const started = Date.now();
  const before = await metricValue(svc, 'flashsale_in_process_refusals_total');
  for (let i = 0; Date.now() - started < 30_000; i++) {
    const status = await order(svc, { userId: `${prefix}-${i}`, productId });
    if (status !== 410) throw new Error(`expected 410 for a sold-out product, got ${status}`);
    if ((await metricValue(svc, 'flashsale_in_process_refusals_total')) > before) return Date.now() - started;
    await sleep(2);
  }
  throw new Error(`product ${productId} was not answered from memory within 30 s`);
}

const newProduct = (ctx: Ctx, svc: ServiceProcess, p: NewProduct) => createProductViaApi(svc.url, ctx.adminToken, p);

/** Unmeasured load for 2 s: JIT-compiled before anything is timed. */
async function warmUp(ctx: Ctx, svc: ServiceProcess, load: Partial<LoadSpec>, label: string): Promise<void> {
  await runLoad({ url: svc.url, connections: ctx.connections, durationS: 2, timeoutS: 20, label, ...load });
}

async function heapUsedMb(svc: ServiceProcess): Promise<number> {
  return (await metricValue(svc, 'flashsale_nodejs_heap_size_used_bytes')) / 1e6;
}

/**
 * The board's entry for `holders` users on its own, measured in this process between two forced
 * collections (run with --expose-gc): the service's heap figures carry garbage of their own.
 */
function entryMb(holders: number): number | null {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) return null;
  gc();
  const before = process.memoryUsage().heapUsed;
  // As the snapshot hands them over: user ids of the length a real one has, order ids as numbers.
  const entry = new Map<string, number>(
    Array.from({ length: holders }, (_, i) => [`memory-buyer-${i}`, 1_000_000 + i]),
  );
  gc();
  const mb = (process.memoryUsage().heapUsed - before) / 1e6;
  if (entry.size !== holders) throw new Error('unreachable');
  return mb;
}

/** A product of `holders` units, sold out straight in PostgreSQL (a fixture), then learnt by the process. */
async function boardMemory(ctx: Ctx, svc: ServiceProcess, holders: number) {
  const productId = await newProduct(ctx, svc, { name: 'door memory', stock: holders, segments: 20 });
  await ctx.db.query(
    `INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at)
     SELECT $1, 'memory-buyer-' || g, 1, jsonb_build_array(jsonb_build_object('segment', g % 20, 'quantity', 1)), 'reserved', now() + interval '1 hour'
       FROM generate_series(1, $2::int) g`,
    [productId, holders],
  );
  await ctx.db.query('UPDATE stock_segments SET stock = 0 WHERE product_id = $1', [productId]);
  await fetch(`${svc.url}/metrics`);
  const heapBeforeMb = await heapUsedMb(svc);
  const learnMs = await untilRefusedFromMemory(svc, productId, 'memory-late');
  return { holders, heapBeforeMb, heapAfterMb: await heapUsedMb(svc), learnMs, entryMb: entryMb(holders) };
}

async function runDoor(flags: Partial<Record<'duration' | 'connections' | 'holders' | 'node-flags', string>>) {
  const durationS = Number(flags.duration ?? 8);
  const connections = Number(flags.connections ?? 100);
  const holders = Number(flags.holders ?? 100_000);
  // For profiling: --node-flags="--cpu-prof --cpu-prof-dir=/tmp/prof" writes one profile per service start.
  const nodeFlags = splitFlags(flags['node-flags']) ?? [];
  const log = (line: string) => process.stderr.write(`${line}\n`);
  const startedAt = new Date().toISOString();
  return withServers('door', log, async (servers) => {
    const ctx = { ...servers, durationS, connections, log };
    const start = async (env: Record<string, string>) => {
      const svc = await servers.start({ LOCK_WAIT_MS: '30000', DB_TIMEOUT_MS: '30000', ...env }, nodeFlags);
      await warmUp(ctx, svc, { get: '/health/live', okStatus: 200 }, 'warm-up');
      return svc;
    };
    const rows: DoorRow[] = [];
    // Rows compared with each other are measured interleaved (A, B, A, B, half the time each) in the
    // same process, or in alternating starts: a one-off slow second, or a start that lands on a
    // busier moment of this shared machine, then weighs on both sides alike.
    const halfTime = { ...ctx, durationS: durationS / 2 };
    const inTurns = async <T>(parts: T[], measureOne: (part: T) => Promise<DoorRow>) => {
      const measured: DoorRow[][] = parts.map(() => []);
      for (let round = 0; round < 2; round++)
        for (const [i, part] of parts.entries()) measured[i].push(await measureOne(part));
      rows.push(...measured.map(merge));
    };
    const interleaved = (svc: ServiceProcess, parts: Array<[string, Partial<LoadSpec>]>) =>
      inTurns(parts, ([id, load]) => measure(halfTime, svc, id, load));

    // 1. Identity off, no limits: the floor and the refusals, interleaved; then the orders.
    let svc = await start({});
    const soldOut = await newProduct(ctx, svc, { name: 'door sold out', stock: 20, segments: 20 });
    const holding = Array.from({ length: 20 }, (_, i) => ({ userId: `holder-${i}`, productId: soldOut }));
    for (const body of holding) if ((await order(svc, body)) !== 201) throw new Error('the sell-out failed');
    await untilRefusedFromMemory(svc, soldOut, 'teach');
    // Unmeasured: the refusal path compiled by the JIT before it is timed, as the floor's was.
    await warmUp(ctx, svc, { productId: soldOut, userPrefix: 'warm-late-', okStatus: 410 }, 'warm-up refusals');
    let late = 0;
    await interleaved(svc, [
      ['health-live-plain', { get: '/health/live' }],
      ['sold-out-410', { bodyOf: () => JSON.stringify({ userId: `late-${late++}`, productId: soldOut }) }],
      ['already-ordered-409', { bodies: holding.map((body) => JSON.stringify(body)) }],
    ]);
    const memory = await boardMemory(ctx, svc, holders);
    await svc.stop();

    // 2. Orders with buyer identity off and on (HS256, a token per buyer), in alternating starts: off, on, off, on.
    const key = new TextEncoder().encode(JWT_SECRET);
    const exp = Math.floor(Date.now() / 1000) + 3600;
    const tokens: string[] = [];
    let next = 0;
    let buyer = 0;
    const ordersOf = async (identity: boolean): Promise<DoorRow> => {
      svc = await start(identity ? { BUYER_JWT_SECRET: JWT_SECRET } : {});
      const productId = await newProduct(ctx, svc, { name: 'door orders', stock: 10_000_000, segments: 20 });
      // Every request takes the next buyer (and token): no buyer orders twice, the warm-ups' included.
      const load: Partial<LoadSpec> = {
        bodyOf: () => JSON.stringify(identity ? { productId } : { userId: `buyer-${buyer++}`, productId }),
        headersOf: () => ({ authorization: `Bearer ${tokens[(identity ? next++ : buyer) % tokens.length]}` }),
      };
      await warmUp(ctx, svc, load, 'warm-up orders');
      const row = await measure(halfTime, svc, `orders-${identity ? 'hs256' : 'plain'}`, load);
      await svc.stop();
      return row;
    };
    // Signed up front: both loads send a token (identity off ignores it), so the load generator,
    // on the same cores, does the same work for both and the difference is the service's.
    const count = 40_000;
    log(`signing ${count} buyer tokens ...`);
    for (let i = 0; i < count; i++)
      tokens.push(await new SignJWT({ sub: `jwt-buyer-${i}`, exp }).setProtectedHeader({ alg: 'HS256' }).sign(key));
    await inTurns([false, true], ordersOf);
    if (next > tokens.length) log(`note: ${next - tokens.length} requests reused a token (answered 409)`);

    // 3. One user over a budget of 1 call per second, interleaved with the floor.
    svc = await start({ RATE_LIMIT_USER: '1' });
    // A sale that has not started: whatever passes the budget changes nothing (403).
    const startsAt = new Date(Date.now() + 3_600_000).toISOString();
    const later = await newProduct(ctx, svc, { name: 'door limited', stock: 10, segments: 2, startsAt });
    const eager = [JSON.stringify({ userId: 'eager', productId: later })];
    await warmUp(ctx, svc, { bodies: eager, okStatus: 429 }, 'warm-up 429s');
    await interleaved(svc, [
      ['health-live-limited', { get: '/health/live' }],
      ['rate-limited-429', { bodies: eager }],
    ]);
    await svc.stop();

    return { startedAt, machine: machine(), durationS, connections, rows, memory, targets: doorTargets(rows) };
  });
}

export type DoorReport = Awaited<ReturnType<typeof runDoor>>;

if (require.main === module)
  reportMain(
    'door',
    [
      ['duration', 'connections', 'holders', 'node-flags'],
      'npm run bench:door -- [--duration S (8)] [--connections N (100)] [--holders N (100000)] [--out DIR (bench/results)]',
    ],
    runDoor,
    renderDoor,
    'bench:door failed: ',
  );
