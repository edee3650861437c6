// Turns a benchmark run into what people read: the console table, latest.md (with the machine,
// settings, per-hold tables, ratios against the ideal, the sweep with its Mermaid charts, the
// sale, memory), plus latest.json with every figure for tooling.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PlanOptions, ScenarioResult, StockLocking } from './scenarios';
import { ProcessPeak } from './service';

export interface ServiceRun {
  locking: StockLocking;
  holdMs: number;
  workers: number;
  processes: ProcessPeak[];
  rssSupported: boolean;
}

export interface BenchmarkReport {
  startedAt: string;
  finishedAt: string;
  command: string;
  machine: { cores: number; cpuModel: string; memoryGb: number; os: string; node: string; postgres: string; redis: string };
  settings: PlanOptions & {
    quick: boolean;
    durationS: number;
    connections: number;
    workers: number;
    warmUpS: number;
    lock: { ttlMs: number; waitMs: number; retryDelayMs: number; retryJitterMs: number };
    dependencies: { postgres: string; redis: string };
  };
  scenarios: ScenarioResult[];
  services: ServiceRun[];
  rssTargetMb: number;
}

const MODE_NAME: Record<StockLocking, string> = { redlock: 'Redlock segments', database: 'no-lock peer (PG row lock)' };

function rate(n: number): string {
  if (!Number.isFinite(n)) return '-';
  return n >= 100 ? n.toFixed(0) : n.toFixed(1);
}
function ms(n: number | undefined | null): string {
  if (n === undefined || n === null || !Number.isFinite(n)) return '-';
  return n >= 100 ? n.toFixed(0) : n.toFixed(1);
}
function ratio(a: number | undefined, b: number | undefined): string {
  if (a === undefined || b === undefined || !(b > 0) || !Number.isFinite(a)) return '-';
  return `${(a / b).toFixed(2)}x`;
}
/** `20 x 50` for an even split; the service spreads any remainder, so just the count otherwise. */
function layout(r: { segments: number; stock: number }): string {
  return r.stock % r.segments === 0 ? `${r.segments} x ${r.stock / r.segments}` : `${r.segments} segments, ${r.stock} units`;
}
function codes(r: ScenarioResult): string {
  return Object.entries(r.statusCounts)
    .sort(([a], [b]) => Number(a) - Number(b))
    .map(([c, n]) => `${c}:${n}`)
    .join(' ');
}
function fivexx(r: ScenarioResult): number {
  return Object.entries(r.statusCounts)
    .filter(([c]) => Number(c) >= 500)
    .reduce((s, [, n]) => s + n, 0);
}
function statusWord(r: ScenarioResult): string {
  return r.status === 'ok' ? 'ok' : '**FAILED**';
}
function find(report: BenchmarkReport, locking: StockLocking, holdMs: number, segments: number): ScenarioResult | undefined {
  return report.scenarios.find((s) => s.kind === 'steady' && s.locking === locking && s.holdMs === holdMs && s.segments === segments);
}
function failed(report: BenchmarkReport): ScenarioResult[] {
  return report.scenarios.filter((s) => s.status !== 'ok');
}
function metricCell(r: ScenarioResult): { busy: string; fall: string; wait: string } {
  const m = r.metrics;
  // The peer takes no Redis lock, so its lock counters stay 0 by construction, not by merit.
  if (r.locking === 'database') return { busy: 'n/a', fall: 'n/a', wait: 'n/a' };
  if (m.source === 'unavailable' || m.lockBusy === null) return { busy: '-', fall: '-', wait: '-' };
  const mark = m.source === 'partial' ? '*' : '';
  return {
    busy: `${m.lockBusy}${mark}`,
    fall: `${m.falloversBusy}/${m.falloversEmpty}${mark}`,
    wait: m.lockWaitCount ? `${m.lockWaitCount} x ${ms(m.lockWaitMeanMs)} ms${mark}` : `0${mark}`,
  };
}

/** Plain-text table for the terminal, one block per hold time, then the sale and memory. */
export function renderTable(report: BenchmarkReport): string {
  const lines: string[] = [];
  const pad = (cells: string[], widths: number[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  const steady = report.scenarios.filter((s) => s.kind === 'steady');
  const holds = [...new Set(steady.map((s) => s.holdMs))].sort((a, b) => a - b);
  const head = ['scenario', 'orders/s', 'vs 1 seg', 'ideal', 'vs peer', 'p50 ms', 'p99 ms', 'max ms', '5xx', 'codes', 'verified'];
  const widths = [22, 9, 9, 6, 8, 8, 8, 8, 5, 30, 8];
  for (const hold of holds) {
    lines.push(`ORDER_HOLD_MS=${hold}  (${report.settings.connections} connections, ${report.settings.durationS} s, ${report.settings.workers} worker(s))`);
    lines.push(pad(head, widths));
    for (const r of steady.filter((s) => s.holdMs === hold).sort((a, b) => (a.locking === b.locking ? a.segments - b.segments : a.locking === 'redlock' ? -1 : 1))) {
      const single = find(report, r.locking, hold, 1);
      const peer = r.locking === 'redlock' ? find(report, 'database', hold, r.segments) : undefined;
      lines.push(
        pad(
          [
            r.id,
            rate(r.ordersPerSec),
            r.segments === 1 ? '1.00x' : ratio(r.ordersPerSec, single?.ordersPerSec),
            `${r.segments}x`,
            ratio(r.ordersPerSec, peer?.ordersPerSec),
            ms(r.latency201Ms?.p50),
            ms(r.latency201Ms?.p99),
            ms(r.latency201Ms?.max),
            String(fivexx(r)),
            codes(r).slice(0, 30),
            r.status === 'ok' ? 'ok' : 'FAILED',
          ],
          widths,
        ),
      );
    }
    lines.push('');
  }
  const sales = report.scenarios.filter((s) => s.kind === 'sale');
  if (sales.length > 0) {
    lines.push(`The sale (ORDER_HOLD_MS=${sales[0].holdMs}): ${sales[0].stock} units, ${sales[0].buyers} buyers`);
    lines.push(pad(['layout', 'sell-out s', 'orders/s', 'orders', '201', '410', 'other', 'verified'], [22, 10, 9, 7, 6, 6, 16, 8]));
    for (const r of sales) {
      const other = Object.entries(r.statusCounts)
        .filter(([c]) => c !== '201' && c !== '410')
        .map(([c, n]) => `${c}:${n}`)
        .join(' ');
      lines.push(
        pad(
          [
            layout(r),
            r.sellOutMs === null ? '-' : (r.sellOutMs / 1000).toFixed(2),
            rate(r.ordersPerSec),
            String(r.verification.audit.orders),
            String(r.statusCounts['201'] ?? 0),
            String(r.statusCounts['410'] ?? 0),
            other || '-',
            r.status === 'ok' ? 'ok' : 'FAILED',
          ],
          [22, 10, 9, 7, 6, 6, 16, 8],
        ),
      );
    }
    lines.push('');
  }
  const peak = peakRss(report);
  if (peak !== null) lines.push(`Peak RSS of a service process: ${peak.toFixed(0)} MB (target < ${report.rssTargetMb} MB: ${peak < report.rssTargetMb ? 'ok' : 'OVER'})`);
  const bad = failed(report);
  if (bad.length > 0) {
    lines.push('');
    lines.push(`!!! ${bad.length} SCENARIO(S) FAILED !!!`);
    for (const r of bad) for (const c of r.verification.checks.filter((x) => !x.ok)) lines.push(`!!! ${r.id}: ${c.name}: ${c.detail}`);
  } else {
    lines.push(`All ${report.scenarios.length} scenarios verified (I1 stock conserved, no segment < 0, I2 no user twice, I3 no false sold-out, no 5xx).`);
  }
  return lines.join('\n');
}

function peakRss(report: BenchmarkReport): number | null {
  const all = report.services.flatMap((s) => s.processes.map((p) => p.peakRssMb));
  return all.length > 0 ? Math.max(...all) : null;
}

export function renderMarkdown(report: BenchmarkReport): string {
  const s = report.settings;
  const m = report.machine;
  const out: string[] = [];
  const bad = failed(report);
  out.push('# Flash-sale order service: load benchmark');
  out.push('');
  out.push(`Run ${report.startedAt} to ${report.finishedAt}${s.quick ? ' (**--quick smoke run**: short scenarios, small sweep and sale; figures are indicative only)' : ''}.`);
  out.push('');
  if (bad.length > 0) {
    out.push(`> **FAILED: ${bad.length} of ${report.scenarios.length} scenarios broke an invariant or answered 5xx.**`);
    for (const r of bad) for (const c of r.verification.checks.filter((x) => !x.ok)) out.push(`> - **${r.id}**: ${c.name}: ${c.detail}`);
  } else {
    out.push(`All ${report.scenarios.length} scenarios verified from PostgreSQL: units ordered + remaining == stocked, no segment below 0, no user twice, no false sold-out, no 5xx.`);
  }
  out.push('');
  out.push('## Machine and settings');
  out.push('');
  out.push(`- Machine: ${m.cores} cores (${m.cpuModel}), ${m.memoryGb} GB memory, ${m.os}; shared by the service, PostgreSQL, Redis and the load generator, so absolute numbers are noisy and the ratios are what matter.`);
  out.push(`- Node ${m.node}; ${m.postgres}; Redis ${m.redis}.`);
  out.push(`- PostgreSQL: ${s.dependencies.postgres}; Redis: ${s.dependencies.redis}.`);
  out.push(`- Service: ${s.workers} worker process(es) (WORKERS=${s.workers}), one start per (STOCK_LOCKING, ORDER_HOLD_MS), ${s.warmUpS} s of unmeasured warm-up after each start.`);
  out.push(`- Load: autocannon, ${s.connections} connections, POST /orders, a distinct userId per request; ${s.durationS} s per steady-state scenario.`);
  out.push(`- Stock layout: steady state ${s.steadyStock.toLocaleString('en-US')} units split evenly into the scenario's segments (never sells out); the sale ${s.sale ? `${s.sale.stock} units as ${s.sale.segments} x ${s.sale.stock / s.sale.segments} and as 1 x ${s.sale.stock}, ${s.sale.buyers} buyers` : 'not run'}.`);
  out.push(`- Locks, the same for every scenario: LOCK_TTL_MS=${s.lock.ttlMs}, LOCK_WAIT_MS=${s.lock.waitMs} (and DB_TIMEOUT_MS=${s.lock.waitMs}, the peer's wait bound inside PostgreSQL), LOCK_RETRY_DELAY_MS=${s.lock.retryDelayMs}, LOCK_RETRY_JITTER_MS=${s.lock.retryJitterMs}.`);
  out.push('- orders/s counts 201 answers only; latencies are of the 201s only (p50/p99/max, ms). The no-lock peer is STOCK_LOCKING=database: no Redis lock, the hold is spent inside the PostgreSQL transaction with the segment row locked.');
  out.push(`- Command: \`${report.command}\``);
  out.push('');

  const steady = report.scenarios.filter((r) => r.kind === 'steady');
  const holds = [...new Set(steady.filter((r) => r.groups.includes('compare')).map((r) => r.holdMs))].sort((a, b) => a - b);
  for (const hold of holds) {
    out.push(`## ORDER_HOLD_MS=${hold}`);
    out.push('');
    out.push('| scenario | locking | segments | orders/s | p50 | p99 | max | answers | lock busy | fallovers busy/empty | lock waits (n x mean) | verified |');
    out.push('|---|---|--:|--:|--:|--:|--:|---|--:|--:|--:|---|');
    const rows = steady
      .filter((r) => r.holdMs === hold && r.groups.includes('compare'))
      .sort((a, b) => (a.locking === b.locking ? a.segments - b.segments : a.locking === 'redlock' ? -1 : 1));
    for (const r of rows) {
      const mc = metricCell(r);
      out.push(
        `| ${r.id} | ${MODE_NAME[r.locking]} | ${r.segments} | **${rate(r.ordersPerSec)}** | ${ms(r.latency201Ms?.p50)} | ${ms(r.latency201Ms?.p99)} | ${ms(r.latency201Ms?.max)} | ${codes(r)}${r.errors ? ` err:${r.errors}` : ''}${r.timeouts ? ` timeouts:${r.timeouts}` : ''} | ${mc.busy} | ${mc.fall} | ${mc.wait} | ${statusWord(r)} |`,
      );
    }
    out.push('');
    const single = find(report, 'redlock', hold, 1);
    const peerSingle = find(report, 'database', hold, 1);
    const ratioRows = s.segments.filter((n) => n !== 1);
    if (ratioRows.length > 0) {
      out.push('| segments | segmented / single lock | ideal | segmented / no-lock peer (same segments) | peer segmented / peer single |');
      out.push('|--:|--:|--:|--:|--:|');
      for (const n of ratioRows) {
        const seg = find(report, 'redlock', hold, n);
        const peer = find(report, 'database', hold, n);
        out.push(`| ${n} | **${ratio(seg?.ordersPerSec, single?.ordersPerSec)}** | ${n}x | ${ratio(seg?.ordersPerSec, peer?.ordersPerSec)} | ${ratio(peer?.ordersPerSec, peerSingle?.ordersPerSec)} |`);
      }
      out.push('');
      out.push(
        hold === 0
          ? 'With no hold the lock is held only for the PostgreSQL statement, so the ideal N x is an upper bound the CPU (2 cores for everything) decides long before the locks do.'
          : `With ${hold} ms inside the lock a single lock can sell at most ${rate(1000 / hold)} orders/s; N segments raise that bound N-fold until CPU, PostgreSQL or Redis becomes the limit.`,
      );
      out.push('');
    }
  }

  if (s.sweep) {
    out.push(`## Segment sweep (ORDER_HOLD_MS=${s.sweepHold})`);
    out.push('');
    const modes: StockLocking[] = s.peer ? ['redlock', 'database'] : ['redlock'];
    out.push(...sweepCharts(report, modes));
    out.push(`| segments | ${modes.map((mo) => `${MODE_NAME[mo]} orders/s | vs 1 segment`).join(' | ')} | ideal | verified |`);
    out.push(`|--:|${modes.map(() => '--:|--:').join('|')}|--:|---|`);
    for (const n of s.sweep) {
      const cells: string[] = [];
      const verdicts: string[] = [];
      for (const mo of modes) {
        const r = find(report, mo, s.sweepHold, n);
        const one = find(report, mo, s.sweepHold, 1);
        cells.push(r ? `**${rate(r.ordersPerSec)}**` : '-', r ? ratio(r.ordersPerSec, one?.ordersPerSec) : '-');
        if (r) verdicts.push(statusWord(r));
      }
      out.push(`| ${n} | ${cells.join(' | ')} | ${n}x | ${verdicts.join(' / ')} |`);
    }
    out.push('');
  }

  const sales = report.scenarios.filter((r) => r.kind === 'sale');
  if (sales.length > 0) {
    const first = sales[0];
    out.push(`## The sale: ${first.stock} units, ${first.buyers} buyers (ORDER_HOLD_MS=${first.holdMs}, Redlock)`);
    out.push('');
    out.push('Every buyer sends one request; the run ends when all are answered.');
    out.push('');
    out.push('| layout | time to sell out | orders/s | orders in PostgreSQL | 201 | 410 | other answers | p50 / p99 of 201s | verified |');
    out.push('|---|--:|--:|--:|--:|--:|---|--:|---|');
    for (const r of sales) {
      const other = Object.entries(r.statusCounts)
        .filter(([c]) => c !== '201' && c !== '410')
        .map(([c, n]) => `${c}:${n}`)
        .join(' ');
      const exact = r.verification.audit.orders === r.stock ? ` (exactly ${r.stock})` : ` (**expected ${r.stock}**)`;
      out.push(
        `| ${layout(r)} | ${r.sellOutMs === null ? '-' : `${(r.sellOutMs / 1000).toFixed(2)} s`} | **${rate(r.ordersPerSec)}** | ${r.verification.audit.orders}${exact} | ${r.statusCounts['201'] ?? 0} | ${r.statusCounts['410'] ?? 0} | ${other || '-'}${r.timeouts ? ` timeouts:${r.timeouts}` : ''} | ${ms(r.latency201Ms?.p50)} / ${ms(r.latency201Ms?.p99)} ms | ${statusWord(r)} |`,
      );
    }
    const seg = sales.find((r) => r.segments !== 1);
    const one = sales.find((r) => r.segments === 1);
    if (seg && one && seg.sellOutMs && one.sellOutMs) {
      out.push('');
      out.push(`Segmented sells out ${(one.sellOutMs / seg.sellOutMs).toFixed(2)}x faster than the single lock (ideal ${seg.segments}x).`);
    }
    out.push('');
  }

  out.push('## Memory (peak RSS per service process, sampled every 500 ms)');
  out.push('');
  const peak = peakRss(report);
  if (peak === null) {
    out.push('Not measured (needs /proc).');
  } else {
    out.push(`Highest: **${peak.toFixed(0)} MB** (target < ${report.rssTargetMb} MB: ${peak < report.rssTargetMb ? 'met' : '**NOT MET**'}).`);
    out.push('');
    out.push('| configuration | primary | workers |');
    out.push('|---|--:|---|');
    for (const svc of report.services) {
      const primary = svc.processes.find((p) => p.role === 'primary');
      const workers = svc.processes.filter((p) => p.role === 'worker');
      out.push(`| ${svc.locking}, hold ${svc.holdMs} ms | ${primary ? `${primary.peakRssMb.toFixed(0)} MB` : '-'} | ${workers.map((w) => `${w.peakRssMb.toFixed(0)} MB`).join(', ') || '-'} |`);
    }
  }
  out.push('');
  out.push('## Lock counters');
  out.push('');
  out.push('From GET /metrics deltas around each scenario (flashsale_segment_lock_busy_total, flashsale_segment_fallovers_total, flashsale_lock_wait_seconds), checked against the orders PostgreSQL holds:');
  out.push('');
  const sources = new Map<string, string[]>();
  for (const r of report.scenarios) sources.set(r.metrics.source, [...(sources.get(r.metrics.source) ?? []), r.id]);
  for (const [src, ids] of sources) {
    const what: Record<string, string> = {
      'all-workers': 'one scrape covered every worker',
      'summed-per-worker': 'per-worker counters, one scrape per worker summed',
      partial: 'figures marked * are from one worker only (partial)',
      unavailable: 'not available',
    };
    out.push(`- ${what[src] ?? src}: ${ids.join(', ')}`);
  }
  out.push('');
  out.push('"lock waits" = orders that found every live segment busy and waited, times their mean wait. In the no-lock peer the waiting happens inside PostgreSQL and is not counted.');
  out.push('');
  return out.join('\n');
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
    const points = (s.sweep ?? []).map((n) => ({ n, r: find(report, mode, s.sweepHold, n) })).filter((p): p is { n: number; r: ScenarioResult } => p.r !== undefined && Number.isFinite(p.r.ordersPerSec));
    return { mode, points, measured: points.map((p) => value(p.r.ordersPerSec)), ideal: one ? points.map((p) => value(one.ordersPerSec * p.n)) : [] };
  });
  // One y scale for every chart, so the modes compare by eye.
  const top = axisTop(Math.max(1, ...charts.flatMap((c) => [...c.measured, ...c.ideal])) * 1.05);
  const out: string[] = [];
  for (const { mode, points, measured, ideal } of charts) {
    if (points.length === 0) continue;
    const failedAt = points.filter((p) => p.r.status !== 'ok').map((p) => p.n);
    out.push('```mermaid');
    out.push('---');
    out.push('config:');
    out.push('  xyChart: { width: 720, height: 360, showLegend: true }');
    out.push('  themeVariables: { xyChart: { plotColorPalette: "#4e79a7, #e15759" } }');
    out.push('---');
    out.push('xychart-beta');
    out.push(`  title "${MODE_NAME[mode]}, hold ${s.sweepHold} ms"`);
    out.push(`  x-axis "segments" [${points.map((p) => p.n).join(', ')}]`);
    out.push(`  y-axis "orders/s" 0 --> ${top}`);
    out.push(`  bar "measured" [${measured.join(', ')}]`);
    if (ideal.length > 0) out.push(`  line "ideal (N x 1 segment)" [${ideal.join(', ')}]`);
    out.push('```');
    out.push('');
    out.push(
      `*${MODE_NAME[mode]}: blue bars = orders/s measured (201s only, ${s.connections} connections, ${s.workers} worker(s)); red line = the ideal, N x its own 1-segment rate.${failedAt.length > 0 ? ` **FAILED at ${failedAt.join(', ')} segments.**` : ''}*`,
    );
    out.push('');
  }
  return out;
}

export function writeReports(report: BenchmarkReport, outDir: string): { json: string; md: string } {
  mkdirSync(outDir, { recursive: true });
  const files = { json: join(outDir, 'latest.json'), md: join(outDir, 'latest.md') };
  writeFileSync(files.json, `${JSON.stringify(report, null, 2)}\n`);
  writeFileSync(files.md, `${renderMarkdown(report)}\n`);
  return files;
}
