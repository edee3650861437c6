// Which scenarios of a run each section reads: the service at the comparison's or the speed
// settings, a peer, GET /health/live, the sold-out refusals, a group, the failures, and the highest
// RSS. The scaling model (bench/scaling-model.ts) reads latest.json through the same finders.
import type { BenchmarkReport, Group, Locking, ReturnsFigures, ScenarioResult, StockLocking } from '../types';

export function returnsOf(report: BenchmarkReport): Array<ScenarioResult & { returns: ReturnsFigures }> {
  return report.scenarios.filter(
    (r): r is ScenarioResult & { returns: ReturnsFigures } => r.kind === 'returns' && r.returns !== undefined,
  );
}

/** Whether the scenario has every one of these fields' values. */
const has = (r: ScenarioResult, w: Partial<ScenarioResult>) =>
  Object.entries(w).every(([k, v]) => r[k as keyof ScenarioResult] === v);

/** The service's steady-state scenario on the one redis-server with these settings. */
function findService(report: BenchmarkReport, w: Partial<ScenarioResult>) {
  return report.scenarios.find(
    (r) => has(r, { kind: 'steady', target: 'service', ...w }) && (r.redis ?? 'single') === 'single',
  );
}

/**
 * A scenario of the locking comparison, the sweep or the sale: the service at --workers and
 * --batch-max, or for 'database' the bare peer's no-lock mode.
 */
export function find(report: BenchmarkReport, locking: StockLocking, holdMs: number, segments: number) {
  if (locking === 'database') return findPeer(report, 'bare', 'database', segments, holdMs);
  const { workers, batchMax } = report.settings;
  return findService(report, { workers, batchMax, locking, holdMs, segments });
}
/** The service beside the peers and in the group-commit comparison (--speed-workers processes). */
export function findFast(
  report: BenchmarkReport,
  w: { locking?: StockLocking; holdMs?: number; segments?: number; batchMax: number | null },
): ScenarioResult | undefined {
  const s = report.settings;
  const { locking = 'redlock', holdMs = 0, segments = s.speedSegments, batchMax } = w;
  return findService(report, { workers: s.speedWorkers, batchMax, locking, holdMs, segments });
}
export function findPeer(
  report: BenchmarkReport,
  target: 'bare' | 'bare-lua',
  locking: Locking,
  segments: number,
  holdMs = 0,
): ScenarioResult | undefined {
  return report.scenarios.find((r) => has(r, { kind: 'steady', target, locking, holdMs, segments }));
}
export function findHealth(report: BenchmarkReport): ScenarioResult | undefined {
  return report.scenarios.find((r) => r.kind === 'health');
}
/** The refusals of a sold-out product (at --speed-workers). */
export function findSoldOut(report: BenchmarkReport): ScenarioResult | undefined {
  return report.scenarios.find((r) => r.kind === 'soldout');
}
export function inGroup(report: BenchmarkReport, g: Group): ScenarioResult[] {
  return report.scenarios.filter((r) => r.groups.includes(g));
}

export function failed(report: BenchmarkReport): ScenarioResult[] {
  return report.scenarios.filter((s) => s.status !== 'ok');
}

/** The highest RSS of any service process (the peers are not the service and do not count). */
export function peakRss(report: BenchmarkReport): number | null {
  const all = report.services.filter((s) => s.target === 'service').flatMap((s) => s.processes.map((p) => p.peakRssMb));
  return all.length > 0 ? Math.max(...all) : null;
}
