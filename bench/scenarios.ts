// The benchmark's scenarios: which ones a run holds (the comparison, the segment sweep, the
// no-Redis-lock peer, the literal sale) and how one is run: a fresh product, load, quiet, verify.
import { Client } from 'pg';
import { runLoad, Latency } from './load';
import { MetricDeltas, scenarioDeltas, snapshot } from './metrics';
import { auditProduct, Verification, verify, waitQuiet } from './verify';

export type StockLocking = 'redlock' | 'database';

export interface ScenarioSpec {
  /** Stable id, e.g. `redlock-h20-s20`, `sale-redlock-h20-s1`. */
  id: string;
  kind: 'steady' | 'sale';
  /** Why the scenario is in the run: the hold-time comparison, the sweep, or the sale. */
  groups: Array<'compare' | 'sweep' | 'sale'>;
  locking: StockLocking;
  holdMs: number;
  segments: number;
  stock: number;
  /** The sale only: one request per distinct buyer. */
  buyers?: number;
}

export interface ScenarioResult extends ScenarioSpec {
  productId: number;
  connections: number;
  /** Seconds of load as measured (steady), or from the first request to the last answer (sale). */
  elapsedS: number;
  responses: number;
  statusCounts: Record<string, number>;
  created: number;
  /** 201s per second: over the load (steady) or until the last unit sold (sale). */
  ordersPerSec: number;
  latency201Ms: Latency | null;
  errors: number;
  timeouts: number;
  /** The sale: ms from the first request to the last 201. */
  sellOutMs: number | null;
  /** Orders in PostgreSQL once the service went quiet (includes answers autocannon hung up on). */
  ordersInDb: number;
  metrics: MetricDeltas;
  verification: Verification;
  status: 'ok' | 'FAILED';
}

export interface PlanOptions {
  holds: number[];
  segments: number[];
  sweep: number[] | null;
  sweepHold: number;
  peer: boolean;
  sale: { stock: number; segments: number; buyers: number; holdMs: number } | null;
  steadyStock: number;
}

export function scenarioId(locking: StockLocking, holdMs: number, segments: number, sale = false): string {
  return `${sale ? 'sale-' : ''}${locking}-h${holdMs}-s${segments}`;
}

/**
 * Every scenario of a run, grouped by service configuration (locking mode, hold time): the
 * service is started once per configuration, and the same (locking, hold, segments) is measured
 * once even when both the comparison and the sweep want it.
 */
export function plan(o: PlanOptions): Array<{ locking: StockLocking; holdMs: number; scenarios: ScenarioSpec[] }> {
  const modes: StockLocking[] = o.peer ? ['redlock', 'database'] : ['redlock'];
  const holds = [...new Set([...o.holds, ...(o.sweep ? [o.sweepHold] : []), ...(o.sale ? [o.sale.holdMs] : [])])];
  const configs: Array<{ locking: StockLocking; holdMs: number; scenarios: ScenarioSpec[] }> = [];
  for (const locking of modes) {
    for (const holdMs of holds) {
      const byId = new Map<string, ScenarioSpec>();
      const want = (segments: number, group: 'compare' | 'sweep') => {
        const id = scenarioId(locking, holdMs, segments);
        const s = byId.get(id) ?? { id, kind: 'steady' as const, groups: [], locking, holdMs, segments, stock: o.steadyStock };
        if (!s.groups.includes(group)) s.groups.push(group);
        byId.set(id, s);
      };
      if (o.holds.includes(holdMs)) for (const n of [1, ...o.segments]) want(n, 'compare');
      if (o.sweep && holdMs === o.sweepHold) for (const n of o.sweep) want(n, 'sweep');
      const scenarios = [...byId.values()].sort((a, b) => a.segments - b.segments);
      // The sale is about the product's own locks; the peer has none to show.
      if (o.sale && locking === 'redlock' && holdMs === o.sale.holdMs) {
        for (const segments of [o.sale.segments, 1]) {
          scenarios.push({ id: scenarioId(locking, holdMs, segments, true), kind: 'sale', groups: ['sale'], locking, holdMs, segments, stock: o.sale.stock, buyers: o.sale.buyers });
        }
      }
      if (scenarios.length > 0) configs.push({ locking, holdMs, scenarios });
    }
  }
  return configs;
}

export interface RunContext {
  url: string;
  adminToken: string;
  db: Client;
  workers: number;
  connections: number;
  durationS: number;
  lockWaitMs: number;
  progress: (line: string) => void;
  signal?: AbortSignal;
}

export async function createProduct(url: string, adminToken: string, p: { name: string; stock: number; segments: number }): Promise<number> {
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
  const productId = await createProduct(ctx.url, ctx.adminToken, { name: 'bench warm-up', stock: 1_000_000, segments: 20 });
  await runLoad({
    url: ctx.url,
    productId,
    userPrefix: `w${productId}-`,
    connections: ctx.connections,
    durationS: seconds,
    timeoutS: autocannonTimeoutS(ctx.lockWaitMs),
    label: 'warm-up',
    signal: ctx.signal,
  });
  await waitQuiet(ctx.db, productId, 300, ctx.lockWaitMs + 5000, ctx.signal);
}

/** Longer than the longest an order may wait for a lock, so a slow 201 is not cut off as a timeout. */
function autocannonTimeoutS(lockWaitMs: number): number {
  return Math.ceil(lockWaitMs / 1000) + 15;
}

export async function runScenario(ctx: RunContext, spec: ScenarioSpec): Promise<ScenarioResult> {
  const productId = await createProduct(ctx.url, ctx.adminToken, { name: `bench ${spec.id}`, stock: spec.stock, segments: spec.segments });
  const before = await snapshot(ctx.url, ctx.workers);
  const load = await runLoad({
    url: ctx.url,
    productId,
    userPrefix: `b${productId}-`,
    connections: ctx.connections,
    durationS: spec.kind === 'steady' ? ctx.durationS : undefined,
    amount: spec.kind === 'sale' ? spec.buyers : undefined,
    timeoutS: autocannonTimeoutS(ctx.lockWaitMs),
    label: spec.id,
    progress: ctx.progress,
    signal: ctx.signal,
  });
  // Quiet = no new order for a few lock holds; capped by the longest a request may wait.
  const ordersInDb = await waitQuiet(ctx.db, productId, Math.max(500, spec.holdMs * 10), ctx.lockWaitMs + 10_000, ctx.signal);
  const after = await snapshot(ctx.url, ctx.workers);
  const audit = await auditProduct(ctx.db, productId);
  const verification = verify(audit, {
    statusCounts: load.statusCounts,
    created: load.created,
    allAnswered: spec.kind === 'sale' && load.responses === spec.buyers,
    expectSoldOut: spec.kind === 'sale',
  });
  const sellOutMs = spec.kind === 'sale' ? load.lastCreatedAtMs : null;
  const rateWindowS = spec.kind === 'sale' && sellOutMs ? sellOutMs / 1000 : load.elapsedS;
  return {
    ...spec,
    productId,
    connections: Math.min(ctx.connections, spec.buyers ?? Infinity),
    elapsedS: load.elapsedS,
    responses: load.responses,
    statusCounts: load.statusCounts,
    created: load.created,
    ordersPerSec: rateWindowS > 0 ? load.created / rateWindowS : 0,
    latency201Ms: load.latency201,
    errors: load.errors,
    timeouts: load.timeouts,
    sellOutMs,
    ordersInDb,
    metrics: scenarioDeltas(before, after, ordersInDb),
    verification,
    status: verification.verified ? 'ok' : 'FAILED',
  };
}
