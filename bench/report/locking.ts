// The locking modes per hold time (Redlock segments against one lock and against the no-Redis-lock
// mode, with the ideal N x), and where the lock counters of every scenario came from.
import type { BenchmarkReport, ScenarioResult, StockLocking } from '../types';
import { find, inGroup } from './find';
import { batchName, codes, holdName, metricCell, MODE_NAME, ms, rate, ratio, statusWord } from './format';

/** latest.md's section per hold time of the locking comparison. */
export function lockingMarkdown(report: BenchmarkReport): string[] {
  const s = report.settings;
  const steady = inGroup(report, 'compare');
  const holds = [...new Set(steady.map((r) => r.holdMs))].sort((a, b) => a - b);
  const row = (r: ScenarioResult) => {
    const mc = metricCell(r);
    return `| ${r.id} | ${MODE_NAME[r.locking as StockLocking]} | ${r.segments} | **${rate(r.ordersPerSec)}** | ${ms(r.latency201Ms?.p50)} | ${ms(r.latency201Ms?.p99)} | ${ms(r.latency201Ms?.max)} | ${codes(r)}${r.errors ? ` err:${r.errors}` : ''}${r.timeouts ? ` timeouts:${r.timeouts}` : ''} | ${mc.busy} | ${mc.fall} | ${mc.wait} | ${statusWord(r)} |`;
  };
  const ratioRows = s.segments.filter((n) => n !== 1);
  const ratios = (hold: number) => {
    const single = find(report, 'redlock', hold, 1);
    const peerSingle = find(report, 'database', hold, 1);
    return ratioRows.map((n) => {
      const seg = find(report, 'redlock', hold, n);
      const peer = find(report, 'database', hold, n);
      return `| ${n} | **${ratio(seg?.ordersPerSec, single?.ordersPerSec)}** | ${n}x | ${ratio(seg?.ordersPerSec, peer?.ordersPerSec)} | ${ratio(peer?.ordersPerSec, peerSingle?.ordersPerSec)} |`;
    });
  };
  return holds.flatMap((hold) => [
    `## Locking modes, ORDER_HOLD_MS=${holdName(hold)} (WORKERS=${s.workers}, ORDER_BATCH_MAX ${batchName(s.batchMax)})`,
    '',
    '| scenario | locking | segments | orders/s | p50 | p99 | max | answers | lock busy | fallovers busy/empty | lock waits (n x mean) | verified |',
    '|---|---|--:|--:|--:|--:|--:|---|--:|--:|--:|---|',
    ...steady
      .filter((r) => r.holdMs === hold)
      .sort((a, b) => (a.locking === b.locking ? a.segments - b.segments : a.locking === 'redlock' ? -1 : 1))
      .map(row),
    '',
    ...(ratioRows.length === 0
      ? []
      : [
          '| segments | segmented / single lock | ideal | segmented / no-lock mode (same segments) | no-lock segmented / no-lock single |',
          '|--:|--:|--:|--:|--:|',
          ...ratios(hold),
          '',
          hold === 0
            ? 'With no hold the lock is held only for the PostgreSQL statement, so the ideal N x is an upper bound the CPU (2 cores for everything) decides long before the locks do.'
            : `With ${hold} ms inside the lock (once per lock hold) a single lock gets at most ${rate(1000 / hold)} holds per second, so ${rate(1000 / hold)} orders/s with ORDER_BATCH_MAX=1 and up to ORDER_BATCH_MAX times that with group commit; N segments raise that bound N-fold until CPU, PostgreSQL or Redis becomes the limit.`,
          '',
        ]),
  ]);
}

/** latest.md's account of the lock counters: which scrape each scenario's figures came from. */
export function lockCountersMarkdown(report: BenchmarkReport): string[] {
  const sources = new Map<string, string[]>();
  const what: Record<string, string> = {
    'all-workers': 'one scrape covered every worker',
    'summed-per-worker': 'per-worker counters, one scrape per worker summed',
    partial: 'figures marked * are from one worker only (partial)',
  };
  for (const r of report.scenarios) {
    // "Not available" has several reasons (a peer, no order, no answer); each gets its own line.
    const key = what[r.metrics.source] ?? `not available (${r.metrics.note})`;
    sources.set(key, [...(sources.get(key) ?? []), r.id]);
  }
  return [
    '## Lock counters',
    '',
    'From GET /metrics deltas around each scenario (flashsale_segment_lock_busy_total, flashsale_segment_fallovers_total, flashsale_lock_wait_seconds), checked against the orders PostgreSQL holds:',
    '',
    ...[...sources].map(([why, ids]) => `- ${why}: ${ids.join(', ')}`),
    '',
    '"lock waits" = orders that found every live segment busy and waited, times their mean wait. In the no-lock mode the waiting happens inside PostgreSQL and is not counted.',
    '',
  ];
}
