// The segment sweep: orders/s against segments per locking mode, as Mermaid charts (measured bars,
// the ideal N x as a line) and a table with the ratio to one segment.
import type { BenchmarkReport, ScenarioResult, StockLocking } from '../types';
import { find } from './find';
import { batchName, holdName, MODE_NAME, rate, ratio, statusWord } from './format';

/** latest.md's section of the sweep; none when the run had no sweep. */
export function sweepMarkdown(report: BenchmarkReport): string[] {
  const s = report.settings;
  if (!s.sweep) return [];
  const modes: StockLocking[] = s.peer ? ['redlock', 'database'] : ['redlock'];
  const row = (n: number) => {
    const cells: string[] = [];
    const verdicts: string[] = [];
    for (const mo of modes) {
      const r = find(report, mo, s.sweepHold, n);
      const one = find(report, mo, s.sweepHold, 1);
      cells.push(r ? `**${rate(r.ordersPerSec)}**` : '-', r ? ratio(r.ordersPerSec, one?.ordersPerSec) : '-');
      if (r) verdicts.push(statusWord(r));
    }
    return `| ${n} | ${cells.join(' | ')} | ${n}x | ${verdicts.join(' / ')} |`;
  };
  return [
    `## Segment sweep (ORDER_HOLD_MS=${holdName(s.sweepHold)}, WORKERS=${s.workers}, ORDER_BATCH_MAX ${batchName(s.batchMax)})`,
    '',
    ...sweepCharts(report, modes),
    `| segments | ${modes.map((mo) => `${MODE_NAME[mo]} orders/s | vs 1 segment`).join(' | ')} | ideal | verified |`,
    `|--:|${modes.map(() => '--:|--:').join('|')}|--:|---|`,
    ...s.sweep.map(row),
    '',
  ];
}

/** A round top for an axis: `v` rounded up to a step of 1, 2 or 5 times a power of ten, about a fifth of `v`. */
function axisTop(v: number): number {
  const raw = Math.max(v, 1) / 5;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * p).find((x) => x >= raw) ?? 10 * p;
  return Math.ceil(v / step) * step;
}

/**
 * One Mermaid xychart per locking mode of the sweep: bars are what was measured, the line is the
 * ideal (N x that mode's single lock). Mermaid draws it where the report is read (GitHub, most
 * Markdown viewers); a chart per mode keeps each one readable. Newer Mermaid also draws a legend
 * from the series titles; the caption under the chart says the same for older ones.
 */
function sweepCharts(report: BenchmarkReport, modes: StockLocking[]): string[] {
  const s = report.settings;
  const value = (v: number) => Number(rate(v));
  const charts = modes.map((mode) => {
    const one = find(report, mode, s.sweepHold, 1);
    const points = (s.sweep ?? [])
      .map((n) => ({ n, r: find(report, mode, s.sweepHold, n) }))
      .filter((p): p is { n: number; r: ScenarioResult } => p.r !== undefined && Number.isFinite(p.r.ordersPerSec));
    return {
      mode,
      points,
      measured: points.map((p) => value(p.r.ordersPerSec)),
      ideal: one ? points.map((p) => value(one.ordersPerSec * p.n)) : [],
    };
  });
  // One y scale for every chart, so the modes compare by eye.
  const top = axisTop(Math.max(1, ...charts.flatMap((c) => [...c.measured, ...c.ideal])) * 1.05);
  return charts.flatMap(({ mode, points, measured, ideal }) => {
    if (points.length === 0) return [];
    const failedAt = points.filter((p) => p.r.status !== 'ok').map((p) => p.n);
    return [
      '```mermaid',
      '---',
      'config:',
      '  xyChart: { width: 720, height: 360, showLegend: true }',
      '  themeVariables: { xyChart: { plotColorPalette: "#4e79a7, #e15759" } }',
      '---',
      'xychart-beta',
      `  title "${MODE_NAME[mode]}, hold ${s.sweepHold} ms per lock hold"`,
      `  x-axis "segments" [${points.map((p) => p.n).join(', ')}]`,
      `  y-axis "orders/s" 0 --> ${top}`,
      `  bar "measured" [${measured.join(', ')}]`,
      ...(ideal.length > 0 ? [`  line "ideal (N x 1 segment)" [${ideal.join(', ')}]`] : []),
      '```',
      '',
      `*${MODE_NAME[mode]}: blue bars = orders/s measured (201s only, ${s.connections} connections, ${s.workers} worker(s)); red line = the ideal, N x its own 1-segment rate.${failedAt.length > 0 ? ` **FAILED at ${failedAt.join(', ')} segments.**` : ''}*`,
      '',
    ];
  });
}
