// Plans, scenario rows and reports for the benchmark's unit specs (the report's arithmetic
// and wording on known figures); not used by a run.
import { planOptionsOf, resolveOptions } from './options';
import { BenchmarkReport, PlanOptions, ScenarioResult } from './types';

/** The plan of a default run, with only the Lua peer and neither the sweep nor the sales. */
export const planOptions: PlanOptions = planOptionsOf(
  resolveOptions({ peers: ['bare-lua'], peer: false, sweep: null, sale: false, returns: false }),
);

/** A verified steady-state row of the service (1 process, 20 segments, hold 0, 3000 orders); `s` overrides. */
export const scenarioRow = (s: Partial<ScenarioResult>): ScenarioResult =>
  ({
    kind: 'steady',
    target: 'service',
    locking: 'redlock',
    workers: 1,
    holdMs: 0,
    segments: 20,
    stock: 1_000_000,
    batchMax: null,
    groups: [],
    status: 'ok',
    statusCounts: { '201': 3000 },
    created: 3000,
    responses: 3000,
    errors: 0,
    timeouts: 0,
    latency201Ms: { p50: 10, p99: 40, max: 60 },
    metrics: { source: 'all-workers', note: '' },
    verification: { verified: true, checks: [], audit: null },
    ...s,
  }) as ScenarioResult;

/** A report of these scenarios under `options`, run with `command`. */
export function reportOf(
  options: PlanOptions,
  command: string,
  scenarios: ScenarioResult[],
  quick = true,
): BenchmarkReport {
  return {
    startedAt: '2026-11-22T00:00:00Z',
    finishedAt: '2026-11-22T00:01:00Z',
    command,
    machine: {
      cores: 2,
      cpuModel: 'test',
      memoryGb: 4,
      os: 'Linux',
      node: 'v22',
      postgres: 'PostgreSQL 17',
      redis: '7.2.4',
    },
    settings: {
      ...options,
      quick,
      durationS: quick ? 3 : 10,
      connections: 100,
      warmUpS: quick ? 1 : 3,
      batchMaxRead: true,
      holdsMax: null,
      lock: { ttlMs: 2000, waitMs: 30000, retryDelayMs: 4, retryJitterMs: 8 },
      dependencies: { postgres: 'embedded', redis: 'redis-server' },
    },
    scenarios,
    services: [],
    rssTargetMb: 200,
  };
}
