// What the scenarios' runs (scenarios.ts, returns.ts) share: the load of orders on a product, the
// wait until it went quiet, the result built from the load, and the verification with checks added.
import { Check, Verification, waitQuiet } from '../harness/verify';
import { autocannonTimeoutS, LoadResult, LoadSpec } from './load';
import { pick } from './pick';
import type { RunContext, ScenarioResult, ScenarioSpec } from './types';

/** POST /orders of distinct buyers `<prefix><productId>-<n>` to the product, at the run's connections. */
export function ordersLoad(ctx: RunContext, productId: number, prefix: string, label: string) {
  return {
    ...pick(ctx, 'url', 'connections', 'progress', 'signal'),
    productId,
    userPrefix: `${prefix}${productId}-`,
    timeoutS: autocannonTimeoutS(ctx.lockWaitMs),
    label,
  } satisfies LoadSpec;
}

/**
 * The product's orders once no new one came for a few lock holds (abandoned requests are still
 * served), capped by the longest a request may wait.
 */
export function quietOrders(ctx: RunContext, productId: number, holdMs: number): Promise<number> {
  return waitQuiet(ctx.db, productId, Math.max(500, holdMs * 10), ctx.lockWaitMs + 10_000, ctx.signal);
}

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
    ...pick(load, 'elapsedS', 'responses', 'statusCounts', 'created'),
    ordersPerSec: load.elapsedS > 0 ? load.created / load.elapsedS : 0,
    latency201Ms: load.latency201,
    ...pick(load, 'errors', 'timeouts'),
    sellOutMs: null,
    ...pick(r, 'ordersInDb', 'metrics', 'costs', 'verification'),
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
