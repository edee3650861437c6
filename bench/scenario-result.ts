// What every scenario's run ends with (scenarios.ts, returns.ts): its result built from its load,
// and its verification with the checks of its own added.
import type { Check, Verification } from '../harness/verify';
import type { LoadResult } from './load';
import type { RunContext, ScenarioResult, ScenarioSpec } from './types';

/** A scenario's result from its main load; `more` overrides what differs by kind. */
export function resultOf(
  ctx: RunContext,
  spec: ScenarioSpec,
  load: LoadResult,
  r: Pick<ScenarioResult, 'productId' | 'ordersInDb' | 'metrics' | 'costs' | 'verification'>,
  more: Partial<ScenarioResult> = {},
): ScenarioResult {
  return {
    ...spec,
    productId: r.productId,
    connections: ctx.connections,
    elapsedS: load.elapsedS,
    responses: load.responses,
    statusCounts: load.statusCounts,
    created: load.created,
    ordersPerSec: load.elapsedS > 0 ? load.created / load.elapsedS : 0,
    latency201Ms: load.latency201,
    errors: load.errors,
    timeouts: load.timeouts,
    sellOutMs: null,
    ordersInDb: r.ordersInDb,
    metrics: r.metrics,
    costs: r.costs,
    verification: r.verification,
    status: r.verification.verified ? 'ok' : 'FAILED',
    ...more,
  };
}

/** The verification with these checks added. */
export function withChecks(v: Verification, checks: Check[]): Verification {
  v.checks.push(...checks);
  v.verified = v.checks.every((c) => c.ok);
  return v;
}
