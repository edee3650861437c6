// The benchmark's scenarios: which ones a run holds (the service against the bare peers, group
// commit, the refusals of a sold-out product, the locking comparison, the segment sweep, the
// literal sale, the sale with returns, the Redis setups) and how one is run: a fresh product, load, quiet, verify
// from PostgreSQL, and what it cost Redis, PostgreSQL and the target's processes. The sale with
// returns has phases of its own and lives in bench/returns.ts.
import { CostSnapshot, costDeltas, ScenarioCosts } from './costs';
import { auditLuaPeer } from './peers';
import { runLoad } from './load';
import { ordersLoad, quietOrders, resultOf, withChecks } from './scenario-result';
import { noMetrics, scenarioDeltas, snapshot } from './metrics';
import { runReturns } from './returns';
import { auditProduct, Check, Verification, verify, waitQuiet } from '../harness/verify';
import { pick } from './pick';
import {
  BARE_HELD_MS,
  Group,
  NewProduct,
  PlanOptions,
  ProcessConfig,
  REDIS_SETUPS,
  RedisSetup,
  RunContext,
  ScenarioResult,
  ScenarioSpec,
} from './types';

/** Id suffix of a scenario on a setup other than the one redis-server, so that every other id stays as it was. */
const REDIS_SUFFIX: Record<RedisSetup, string> = { single: '', quorum: '-rq', cluster: '-rc' };

type Shape = Omit<ScenarioSpec, 'id' | 'groups' | 'stock'> & { stock?: number };

/**
 * `[sale-|soldout-|returns-]<mode>[-w<workers>][-b<batch>]-h<hold>-s<segments>[-rq|-rc]`; `-w` only where the workers
 * differ from the comparison's, `-b` only where ORDER_BATCH_MAX is set, `-rq` / `-rc` only on a Redlock quorum / a
 * Redis Cluster, so the comparison keeps its old ids.
 */
export function scenarioId(s: Shape, baseWorkers: number): string {
  const w = s.workers !== baseWorkers ? `-w${s.workers}` : '';
  if (s.kind === 'health') return `health-live${w}`;
  const b = s.batchMax !== null ? `-b${s.batchMax}` : '';
  const mode =
    s.target === 'service'
      ? `${s.locking}${w}${b}`
      : s.target === 'bare' && s.locking === 'database'
        ? 'bare-nolock'
        : s.target;
  const prefix = s.kind === 'steady' ? '' : `${s.kind}-`;
  return `${prefix}${mode}-h${s.holdMs}-s${s.segments}${REDIS_SUFFIX[s.redis ?? 'single']}`;
}

/**
 * Every scenario of a run, grouped by what has to be started for it (the service with one
 * environment, or a peer): each is started once, and a scenario that several sections want
 * (the same id) is measured once.
 */
export function plan(o: PlanOptions): ProcessConfig[] {
  const specs = new Map<string, ScenarioSpec>();
  const want = (shape: Shape, group: Group) => {
    const id = scenarioId(shape, o.workers);
    const s = specs.get(id) ?? { ...shape, id, groups: [], stock: shape.stock ?? o.steadyStock };
    if (!s.groups.includes(group)) s.groups.push(group);
    specs.set(id, s);
  };
  const steady = { kind: 'steady' as const, target: 'service' as const, locking: 'redlock' as const };
  const fast = { ...steady, workers: o.speedWorkers, holdMs: 0, segments: o.speedSegments };

  if (o.peers.length > 0) {
    // The service with one order per hold, and with group commit, against each peer at hold 0.
    want({ ...fast, kind: 'health', batchMax: 1, segments: 0, stock: 0 }, 'speed');
    want({ ...fast, batchMax: 1 }, 'speed');
    want({ ...fast, batchMax: o.batchMax }, 'speed');
    if (o.peers.includes('bare-one-lock')) want({ ...fast, batchMax: 1, segments: 1 }, 'speed');
    const peer = { kind: 'steady' as const, workers: 1, batchMax: null, holdMs: 0, segments: o.speedSegments };
    if (o.peers.includes('bare')) want({ ...peer, target: 'bare', locking: 'redlock' }, 'speed');
    if (o.peers.includes('bare-nolock')) want({ ...peer, target: 'bare', locking: 'database' }, 'speed');
    if (o.peers.includes('bare-one-lock')) want({ ...peer, target: 'bare', locking: 'redlock', segments: 1 }, 'speed');
    if (o.peers.includes('bare-lua')) want({ ...peer, target: 'bare-lua', locking: 'lua' }, 'speed');
    if (o.peers.includes('bare-held')) {
      for (const segments of [1, o.speedSegments])
        want({ ...peer, target: 'bare', locking: 'redlock', holdMs: BARE_HELD_MS, segments }, 'speed');
    }
  }
  for (const holdMs of o.holds) {
    if (o.batch) {
      for (const segments of [1, o.speedSegments])
        for (const batchMax of [1, o.batchMax]) want({ ...fast, holdMs, segments, batchMax }, 'batch');
    }
    for (const batchMax of o.batchSweep ?? []) want({ ...fast, holdMs, batchMax }, 'batch-sweep');
  }
  // Shares the start of the group-commit service at hold 0: one unit per segment, sold before the load.
  if (o.soldOut) want({ ...fast, kind: 'soldout', batchMax: o.batchMax, stock: o.speedSegments }, 'soldout');

  // The no-Redis-lock mode is the bare peer's (PostgreSQL row locks only), at the same holds and segments.
  const base = { ...steady, workers: o.workers, batchMax: o.batchMax };
  const noLock = { ...steady, target: 'bare' as const, locking: 'database' as const, workers: 1, batchMax: null };
  for (const shape of o.peer ? [base, noLock] : [base]) {
    for (const holdMs of o.holds)
      for (const segments of [1, ...o.segments]) want({ ...shape, holdMs, segments }, 'compare');
    if (o.sweep) for (const segments of o.sweep) want({ ...shape, holdMs: o.sweepHold, segments }, 'sweep');
  }
  // The sale is about the product's own locks; the no-lock mode has none to show.
  if (o.sale) {
    const { holdMs, stock, buyers } = o.sale;
    for (const segments of [o.sale.segments, 1])
      want({ ...base, kind: 'sale', holdMs, segments, stock, buyers }, 'sale');
  }
  // Its own service start: the short expiry sweep it needs must not run under the other scenarios.
  if (o.returns) {
    const { stock, segments, buyers, holdMs, ...returnsPlan } = o.returns;
    want({ ...base, kind: 'returns', holdMs, segments, stock, buyers, returnsPlan }, 'returns');
  }

  // Last, so that the extra Redis servers run only after every other start: the one redis-server's
  // rows are the speed and group-commit scenarios above when those run (the same id, measured once).
  if (o.redisSetups) {
    for (const redis of REDIS_SETUPS)
      for (const batchMax of [o.batchMax, 1])
        want({ ...fast, batchMax, ...(redis === 'single' ? {} : { redis }) }, 'redis-setups');
  }

  const configs = new Map<string, ProcessConfig>();
  for (const s of specs.values()) {
    const expirySweepMs = s.returnsPlan?.expirySweepMs ?? null;
    const redis = s.redis ?? 'single';
    const start = pick(s, 'target', 'locking', 'holdMs', 'workers', 'batchMax');
    const key = [...Object.values(start), expirySweepMs, redis].join('|');
    const c = configs.get(key) ?? { ...start, expirySweepMs, redis, scenarios: [] };
    c.scenarios.push(s);
    configs.set(key, c);
  }
  // Per start: the floor first, then steady state by segments, then the sold-out product, the sale last (it sells out its product).
  const order = { health: 0, steady: 1, soldout: 2, sale: 3, returns: 4 };
  for (const c of configs.values())
    c.scenarios.sort(
      (a, b) =>
        order[a.kind] - order[b.kind] || (a.kind === 'sale' ? b.segments - a.segments : a.segments - b.segments),
    );
  return [...configs.values()];
}

export async function createProductViaApi(url: string, adminToken: string, p: NewProduct): Promise<number> {
  const res = await fetch(`${url}/admin/products`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${adminToken}` },
    body: JSON.stringify(p),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  if (res.status !== 201) throw new Error(`POST /admin/products answered ${res.status}: ${text}`);
  return (JSON.parse(text) as { id: number }).id;
}

/** Load that is not measured: JIT, connection pools and Redis scripts warm before the first figure. */
export async function warmUp(ctx: RunContext, seconds: number): Promise<void> {
  const productId = await ctx.createProduct({ name: 'bench warm-up', stock: 1_000_000, segments: 20 });
  await runLoad({ ...ordersLoad(ctx, productId, 'w', 'warm-up'), durationS: seconds, progress: undefined });
  await waitQuiet(ctx.db, productId, 300, ctx.lockWaitMs + 5000, ctx.signal);
}

/** The costs reading now; null when the reading failed (a cost is a figure, not a check). */
async function readCosts(ctx: RunContext): Promise<CostSnapshot | null> {
  try {
    return await ctx.costs.snapshot(ctx.targetPid);
  } catch (err) {
    ctx.progress(`  costs not read: ${(err as Error).message}`);
    return null;
  }
}

function costsBetween(
  before: CostSnapshot | null,
  after: CostSnapshot | null,
  unit: ScenarioCosts['unit'],
  units: number,
): ScenarioCosts | null {
  return before && after ? costDeltas(before, after, unit, units) : null;
}

/** A steady scenario's length: ctx.requests requests when the run gives them, else ctx.durationS seconds. */
function steadyLoad(ctx: RunContext): { durationS: number } | { amount: number } {
  return ctx.requests ? { amount: ctx.requests } : { durationS: ctx.durationS };
}

/** GET /health/live for the scenario's time: the framework's floor, no order. Verified: every answer 200, nothing dropped. */
async function runHealth(ctx: RunContext, spec: ScenarioSpec): Promise<ScenarioResult> {
  const costsBefore = await readCosts(ctx);
  const load = await runLoad({
    ...pick(ctx, 'url', 'connections', 'progress', 'signal'),
    ...steadyLoad(ctx),
    get: '/health/live',
    okStatus: 200,
    timeoutS: 10,
    label: spec.id,
  });
  const other = load.responses - load.created;
  const checks: Check[] = [
    {
      name: 'every answer 200',
      ok: load.created > 0 && other === 0,
      detail: `${load.created} answered 200, ${other} other`,
    },
    {
      name: 'no errors or timeouts',
      ok: load.errors === 0 && load.timeouts === 0,
      detail: `${load.errors} errors, ${load.timeouts} timeouts`,
    },
  ];
  const costs = costsBetween(costsBefore, await readCosts(ctx), 'answer', load.responses);
  const metrics = noMetrics('GET /health/live sells nothing');
  const verification = { verified: checks.every((c) => c.ok), checks, audit: null };
  return resultOf(ctx, spec, load, { productId: null, ordersInDb: 0, metrics, costs, verification });
}

/** Buyers beyond the stock in the sell-out before the sold-out load: those who find nothing left set the sold-out flag. */
const SOLD_OUT_EXTRA_BUYERS = 20;

/**
 * A product sold out before the load (its units, then a few buyers more), then orders of distinct
 * buyers for the scenario's time: every answer must be 410, nothing may be sold, and the
 * refusals must come from the process's memory (the door's sold-out board: the path a big sale's
 * refusals take). Its costs are per refusal.
 */
async function runSoldOut(ctx: RunContext, spec: ScenarioSpec): Promise<ScenarioResult> {
  if (ctx.target !== 'service') throw new Error('the sold-out scenario measures the service');
  const productId = await ctx.createProduct({ name: `bench ${spec.id}`, stock: spec.stock, segments: spec.segments });
  const presale = await runLoad({
    ...ordersLoad(ctx, productId, 'p', `${spec.id} sell-out`),
    amount: spec.stock + SOLD_OUT_EXTRA_BUYERS,
    progress: undefined,
  });
  const sold = await quietOrders(ctx, productId, 0);
  const before = await snapshot(ctx.url, ctx.workers);
  const costsBefore = await readCosts(ctx);
  const load = await runLoad({ ...ordersLoad(ctx, productId, 'r', spec.id), okStatus: 410, ...steadyLoad(ctx) });
  const ordersInDb = await quietOrders(ctx, productId, 0);
  const costsAfter = await readCosts(ctx);
  const metrics = scenarioDeltas(before, await snapshot(ctx.url, ctx.workers), ordersInDb - sold);
  // Requests in flight when the load stopped are still served (autocannon no longer counts them):
  // the costs are per refusal the service made, which its counter knows.
  const costs = costsBetween(costsBefore, costsAfter, 'answer', metrics.soldOut ?? load.responses);
  const verification = verify(await auditProduct(ctx.db, productId), {
    statusCounts: load.statusCounts,
    created: load.statusCounts['201'] ?? 0,
    allAnswered: true,
    expectSoldOut: true,
  });
  const refused = load.created;
  const checks: Check[] = [
    {
      name: 'sold out before the load',
      ok: presale.statusCounts['201'] === spec.stock && (presale.statusCounts['410'] ?? 0) > 0 && sold === spec.stock,
      detail: `answers ${JSON.stringify(presale.statusCounts)} to ${spec.stock + SOLD_OUT_EXTRA_BUYERS} buyers, ${sold} orders stored`,
    },
    {
      name: 'every answer 410',
      ok: refused > 0 && refused === load.responses && load.errors === 0 && load.timeouts === 0,
      detail: `answers ${JSON.stringify(load.statusCounts)}, ${load.errors} errors, ${load.timeouts} timeouts`,
    },
    { name: 'nothing sold during the load', ok: ordersInDb === sold, detail: `${ordersInDb - sold} orders added` },
  ];
  if (metrics.soldOut != null && metrics.soldOutInProcess != null) {
    // Up to one request per connection is answered after autocannon stopped counting. A poll of the
    // sold-out board slower than 3/4 of SOLD_OUT_STALE_MS sends refusals down the order path until
    // the next one (correct, dearer): the costs show it; most must still come from memory.
    checks.push({
      name: 'refusals from memory',
      ok:
        metrics.soldOutInProcess >= 0.95 * metrics.soldOut &&
        metrics.soldOut >= refused &&
        metrics.soldOut <= refused + ctx.connections,
      detail: `${metrics.soldOutInProcess} of the service's ${metrics.soldOut} SOLD_OUT answers from the process's memory, ${metrics.soldOutShortCircuits ?? 0} from the Redis flag; ${refused} counted here`,
    });
  }
  withChecks(verification, checks);
  return resultOf(ctx, spec, load, { productId, ordersInDb, metrics, costs, verification });
}

export async function runScenario(ctx: RunContext, spec: ScenarioSpec): Promise<ScenarioResult> {
  if (spec.kind === 'health') return runHealth(ctx, spec);
  if (spec.kind === 'soldout') return runSoldOut(ctx, spec);
  if (spec.kind === 'returns') {
    if (ctx.target !== 'service') throw new Error('the sale with returns needs the service (pay, cancel, expiry)');
    return runReturns(ctx, spec);
  }
  const productId = await ctx.createProduct({ name: `bench ${spec.id}`, stock: spec.stock, segments: spec.segments });
  const before = ctx.target === 'service' ? await snapshot(ctx.url, ctx.workers) : null;
  const costsBefore = await readCosts(ctx);
  const load = await runLoad({
    ...ordersLoad(ctx, productId, 'b', spec.id),
    ...(spec.kind === 'sale' ? { amount: spec.buyers } : steadyLoad(ctx)),
  });
  const ordersInDb = await quietOrders(ctx, productId, spec.holdMs);
  const costs = costsBetween(costsBefore, await readCosts(ctx), 'order', ordersInDb);
  const after = ctx.target === 'service' ? await snapshot(ctx.url, ctx.workers) : null;
  const seen = {
    ...pick(load, 'statusCounts', 'created'),
    allAnswered: spec.kind === 'sale' && load.responses === spec.buyers,
    expectSoldOut: spec.kind === 'sale',
  };
  let verification: Verification;
  if (ctx.target === 'bare-lua') {
    // Its stock lives in Redis and stock_segments are never deducted: what is left comes from Redis.
    const audit = await auditLuaPeer(ctx.db, ctx.redisUrl, productId);
    verification = withChecks(verify(audit, seen), [
      {
        name: 'stock_segments untouched',
        ok: audit.segmentsUntouched,
        detail: audit.segmentsUntouched ? 'they still sum to total_stock' : 'they no longer sum to total_stock',
      },
      {
        name: 'every buyer in the Redis buyer set',
        ok: audit.buyersRecorded,
        detail: audit.buyersRecorded ? 'yes' : 'an order slipped past the script',
      },
    ]);
  } else {
    verification = verify(await auditProduct(ctx.db, productId), seen);
  }
  const sellOutMs = spec.kind === 'sale' ? load.lastCreatedAtMs : null;
  const rateWindowS = spec.kind === 'sale' && sellOutMs ? sellOutMs / 1000 : load.elapsedS;
  const metrics =
    ctx.target === 'service' ? scenarioDeltas(before, after, ordersInDb) : noMetrics('a peer has no GET /metrics');
  return resultOf(
    ctx,
    spec,
    load,
    { productId, ordersInDb, metrics, costs, verification },
    {
      connections: Math.min(ctx.connections, spec.buyers ?? Infinity),
      ordersPerSec: rateWindowS > 0 ? load.created / rateWindowS : 0,
      sellOutMs,
    },
  );
}
