// The literal sale: one request per distinct buyer until sold out, as 20 x 50 and as 1 x 1000, with
// the time to sell out and the orders PostgreSQL holds.
import type { BenchmarkReport, ScenarioResult } from '../types';
import { batchName, holdName, layout, ms, rate, statusWord } from './format';

/** latest.md's section of the sale; none when it did not run. */
export function saleMarkdown(report: BenchmarkReport): string[] {
  const s = report.settings;
  const sales = report.scenarios.filter((r) => r.kind === 'sale');
  if (sales.length === 0) return [];
  const first = sales[0];
  const seg = sales.find((r) => r.segments !== 1);
  const one = sales.find((r) => r.segments === 1);
  const row = (r: ScenarioResult) => {
    const other = Object.entries(r.statusCounts)
      .filter(([c]) => c !== '201' && c !== '410')
      .map(([c, n]) => `${c}:${n}`)
      .join(' ');
    const orders = r.verification.audit?.orders;
    const exact = orders === r.stock ? ` (exactly ${r.stock})` : ` (**expected ${r.stock}**)`;
    return `| ${layout(r)} | ${r.sellOutMs === null ? '-' : `${(r.sellOutMs / 1000).toFixed(2)} s`} | **${rate(r.ordersPerSec)}** | ${orders ?? '-'}${exact} | ${r.statusCounts['201'] ?? 0} | ${r.statusCounts['410'] ?? 0} | ${other || '-'}${r.timeouts ? ` timeouts:${r.timeouts}` : ''} | ${ms(r.latency201Ms?.p50)} / ${ms(r.latency201Ms?.p99)} ms | ${statusWord(r)} |`;
  };
  return [
    `## The sale: ${first.stock} units, ${first.buyers} buyers (ORDER_HOLD_MS=${holdName(first.holdMs)}, Redlock, WORKERS=${s.workers}, ORDER_BATCH_MAX ${batchName(s.batchMax)})`,
    '',
    'Every buyer sends one request; the run ends when all are answered.',
    '',
    '| layout | time to sell out | orders/s | orders in PostgreSQL | 201 | 410 | other answers | p50 / p99 of 201s | verified |',
    '|---|--:|--:|--:|--:|--:|---|--:|---|',
    ...sales.map(row),
    ...(seg && one && seg.sellOutMs && one.sellOutMs
      ? [
          '',
          `Segmented sells out ${(one.sellOutMs / seg.sellOutMs).toFixed(2)}x faster than the single lock (ideal ${seg.segments}x).`,
        ]
      : []),
    '',
  ];
}
