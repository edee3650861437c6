// Group commit: ORDER_BATCH_MAX=1 against many orders per lock hold, and the ORDER_BATCH_MAX sweep,
// each row with its ratio to ORDER_BATCH_MAX=1 at the same hold and segments.
import type { BenchmarkReport, Group, ScenarioResult } from '../types';
import { findFast, inGroup } from './find';
import { batchName, codes, holdName, metricCell, ms, rate, ratio, statusWord, steadyLength } from './format';

/** Rows of the group-commit comparison: per hold and segments, ORDER_BATCH_MAX=1 then group commit. */
export function batchRows(report: BenchmarkReport, group: Group): Array<{ r: ScenarioResult; vsOne: string }> {
  return inGroup(report, group)
    .sort(
      (a, b) => a.holdMs - b.holdMs || a.segments - b.segments || (a.batchMax ?? Infinity) - (b.batchMax ?? Infinity),
    )
    .map((r) => {
      const one = findFast(report, { holdMs: r.holdMs, segments: r.segments, batchMax: 1 });
      return { r, vsOne: r.batchMax === 1 ? '1.00x' : ratio(r.ordersPerSec, one?.ordersPerSec) };
    });
}

export function batchMarkdown(report: BenchmarkReport): string[] {
  const s = report.settings;
  const sections = [
    ['batch', 'Group commit: ORDER_BATCH_MAX=1 against many orders per lock hold'],
    ['batch-sweep', 'ORDER_BATCH_MAX sweep'],
  ] as const;
  return sections.flatMap(([group, title]) => {
    const rows = batchRows(report, group);
    if (rows.length === 0) return [];
    return [
      `## ${title}`,
      '',
      `The service, WORKERS=${s.speedWorkers}, Redlock segments, ${s.connections} connections, ${steadyLength(s)} per row. ORDER_BATCH_MAX=1 is the one-order-per-lock-hold design; above 1 the orders of one process waiting for one segment are sold in one lock hold and one SQL statement. ` +
        '**ORDER_HOLD_MS is spent once per lock hold, not once per order**: at 20 ms a single lock gets at most 50 holds per second, each selling one order with ORDER_BATCH_MAX=1 and up to ORDER_BATCH_MAX orders with group commit.',
      ...(s.batchMaxRead
        ? []
        : ['', '> The built service does not read ORDER_BATCH_MAX: these rows differ only in name.']),
      '',
      '| ORDER_HOLD_MS | segments | ORDER_BATCH_MAX | orders/s | vs ORDER_BATCH_MAX=1 | p50 | p99 | max | answers | lock waits (n x mean) | verified |',
      '|---|--:|---|--:|--:|--:|--:|--:|---|--:|---|',
      ...rows.map(
        ({ r, vsOne }) =>
          `| ${holdName(r.holdMs)} | ${r.segments} | ${batchName(r.batchMax)} | **${rate(r.ordersPerSec)}** | ${vsOne} | ${ms(r.latency201Ms?.p50)} | ${ms(r.latency201Ms?.p99)} | ${ms(r.latency201Ms?.max)} | ${codes(r)}${r.timeouts ? ` timeouts:${r.timeouts}` : ''} | ${metricCell(r).wait} | ${statusWord(r)} |`,
      ),
      '',
    ];
  });
}
