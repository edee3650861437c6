// Issue 8's targets as a pass/miss table, each computed from this run's figures (the e2e spec of the
// benchmark checks that every one is measured).
import { BARE_HELD_MS, BenchmarkReport, ScenarioResult } from '../types';
import { findFast, findPeer, inGroup, peakRss } from './find';
import { batchName, ms, rate } from './format';

/** Issue 8's targets, each from this run's figures. */
export function targets(report: BenchmarkReport) {
  const s = report.settings;
  const n = s.speedSegments;
  const out: Array<{ target: string; measured: string; result: 'pass' | 'miss' | 'not measured' }> = [];
  /** A target that passes when `pass` holds; `pass` null: not measured. */
  const add = (target: string, measured: string, pass: boolean | null) =>
    out.push({ target, measured, result: pass === null ? 'not measured' : pass ? 'pass' : 'miss' });
  const w = s.speedWorkers === 1 ? '1 process' : `WORKERS=${s.speedWorkers} (the target is for 1 process)`;
  const atLeast = (
    target: string,
    a: ScenarioResult | undefined,
    b: ScenarioResult | undefined,
    bar: number,
    extra = '',
  ) => {
    const ok = a && b && a.status === 'ok' && b.status === 'ok' && b.ordersPerSec > 0;
    const x = ok ? a.ordersPerSec / b.ordersPerSec : NaN;
    const measured = ok
      ? `${x.toFixed(2)}x (${rate(a.ordersPerSec)} / ${rate(b.ordersPerSec)} orders/s)${extra}`
      : a && b
        ? 'a scenario FAILED'
        : '-';
    add(target, measured, ok ? x >= bar : null);
  };
  const one = findFast(report, { batchMax: 1 });
  const group = findFast(report, { batchMax: s.batchMax });
  atLeast(
    `service, ${w}, ${n} segments, hold 0, ORDER_BATCH_MAX=1 >= 0.8x the bare peer`,
    one,
    findPeer(report, 'bare', 'redlock', n),
    0.8,
  );
  atLeast(
    `service with group commit (ORDER_BATCH_MAX ${batchName(s.batchMax)}), same load, >= 0.7x the bare-lua peer (aim 1x)`,
    group,
    findPeer(report, 'bare-lua', 'lua', n),
    0.7,
    s.batchMaxRead ? '' : '; the built service ignores ORDER_BATCH_MAX',
  );
  const p99 = group?.status === 'ok' ? group.latency201Ms?.p99 : undefined;
  add(
    'service with group commit, same load: p99 <= 50 ms',
    p99 === undefined ? (group ? 'the scenario FAILED' : '-') : `${ms(p99)} ms`,
    p99 === undefined ? null : p99 <= 50,
  );
  // Beside it, the same ratio of the bare peer at the same hold, when the run has it: this machine's floor.
  const [held, heldOne] = [n, 1].map((segments) => findPeer(report, 'bare', 'redlock', segments, BARE_HELD_MS));
  const bareX = [held, heldOne].every((r) => r?.status === 'ok' && r.ordersPerSec > 0)
    ? held!.ordersPerSec / heldOne!.ordersPerSec
    : null;
  atLeast(
    `hold ${BARE_HELD_MS} ms (once per lock hold), ORDER_BATCH_MAX=1, ${w}: ${n} segments >= 19x one lock`,
    findFast(report, { holdMs: BARE_HELD_MS, segments: n, batchMax: 1 }),
    findFast(report, { holdMs: BARE_HELD_MS, segments: 1, batchMax: 1 }),
    19,
    bareX === null
      ? ''
      : `; the bare peer at the same hold: ${bareX.toFixed(2)}x (${rate(held!.ordersPerSec)} / ${rate(heldOne!.ordersPerSec)})`,
  );
  for (const [what, list] of [
    ['the sale keeps running and verifying', report.scenarios.filter((r) => r.kind === 'sale')],
    ['the segment sweep keeps running and verifying', inGroup(report, 'sweep')],
  ] as const) {
    const bad = list.filter((r) => r.status !== 'ok');
    const measured =
      list.length === 0
        ? 'not run'
        : bad.length === 0
          ? `${list.length} of ${list.length} verified`
          : `FAILED: ${bad.map((r) => r.id).join(', ')}`;
    add(what, measured, list.length === 0 ? null : bad.length === 0);
  }
  const peak = peakRss(report);
  add(
    `peak RSS of a service process < ${report.rssTargetMb} MB`,
    peak === null ? 'not sampled (needs /proc)' : `${peak.toFixed(0)} MB`,
    peak === null ? null : peak < report.rssTargetMb,
  );
  return out;
}

export function targetsMarkdown(report: BenchmarkReport): string[] {
  return [
    "## Issue 8's targets, from this run",
    '',
    '| target | measured | result |',
    '|---|---|---|',
    ...targets(report).map((t) => `| ${t.target} | ${t.measured} | ${t.result === 'miss' ? '**miss**' : t.result} |`),
    '',
  ];
}
