// The head and the tail of a report: latest.md's title, verdict, machine and settings; the console's
// closing verdict with every failed check.
import { SERVICE_HEAP_MB } from '../service';
import type { BenchmarkReport } from '../types';
import { failed, returnsOf } from './find';
import { batchName, layout, steadyLength } from './format';

/** latest.md's title, verdict, machine and settings. */
export function summaryMarkdown(report: BenchmarkReport): string[] {
  const s = report.settings;
  const m = report.machine;
  const bad = failed(report);
  // Absent from reports written before the sale with returns existed.
  const rp = s.returns;
  return [
    '# Flash-sale order service: load benchmark',
    '',
    `Run ${report.startedAt} to ${report.finishedAt}${s.quick ? ' (**--quick smoke run**: short scenarios, small sweep and sale; figures are indicative only)' : ''}.`,
    '',
    ...(bad.length > 0
      ? [
          `> **FAILED: ${bad.length} of ${report.scenarios.length} scenarios broke an invariant or answered 5xx.**`,
          ...failedChecks(report).map(([id, c]) => `> - **${id}**: ${c.name}: ${c.detail}`),
        ]
      : [
          `All ${report.scenarios.length} scenarios verified: every order scenario from PostgreSQL (units in live orders + remaining == stocked, no segment below 0, no user with two live orders, no false sold-out, no 5xx; the bare-lua peer's remaining units from Redis${
            returnsOf(report).length > 0
              ? "; the sale with returns: every order's status as its pay or cancel was answered, every returned unit resold exactly once"
              : ''
          }), GET /health/live by every answer being 200.`,
        ]),
    '',
    '## Machine and settings',
    '',
    `- Machine: ${m.cores} cores (${m.cpuModel}), ${m.memoryGb} GB memory, ${m.os}; shared by the service, PostgreSQL, Redis and the load generator, so absolute numbers are noisy and the ratios are what matter.`,
    `- Node ${m.node}; ${m.postgres}; Redis ${m.redis}.`,
    `- PostgreSQL: ${s.dependencies.postgres}; Redis: ${s.dependencies.redis}.`,
    `- Service: WORKERS=${s.speedWorkers} beside the peers and in the group-commit comparison (each peer is one process), WORKERS=${s.workers} in the locking comparison, the segment sweep, the sale and the sale with returns; one start per environment (STOCK_LOCKING, ORDER_HOLD_MS, WORKERS, ORDER_BATCH_MAX, EXPIRY_SWEEP_MS), ${s.warmUpS} s of unmeasured warm-up after each start (peers too).`,
    `- ORDER_BATCH_MAX: ${batchName(s.batchMax)} wherever a row does not name another value; ORDER_HOLDS_MAX: ${s.holdsMax ?? 'service default'}; Node flags of the service: --max-old-space-size=${SERVICE_HEAP_MB} (as \`npm start\`)${(s.nodeFlags ?? []).map((f) => ` ${f}`).join('')}.${s.batchMaxRead ? '' : ' **The built service does not read ORDER_BATCH_MAX: rows that differ only in it measure the same code.**'}`,
    '- ORDER_HOLD_MS is spent once per lock hold, not once per order: with group commit one hold sells up to ORDER_BATCH_MAX orders.',
    `- Load: autocannon, ${s.connections} connections, POST /orders, a distinct userId per request; ${steadyLength(s)} per steady-state scenario.`,
    `- Stock layout: steady state ${s.steadyStock.toLocaleString('en-US')} units split evenly into the scenario's segments (never sells out); the sale ${s.sale ? `${s.sale.stock} units as ${s.sale.segments} x ${s.sale.stock / s.sale.segments} and as 1 x ${s.sale.stock}, ${s.sale.buyers} buyers` : 'not run'}.`,
    `- The sale with returns: ${rp ? `${rp.stock} units as ${layout(rp)}, ${rp.buyers} buyers, ${Math.round(rp.share * 100)}% of the reservations back (${Math.round(rp.cancelShare * 100)}% of those cancelled, the rest expired), paymentTimeoutS ${rp.paymentTimeoutS} s, its own service start with EXPIRY_SWEEP_MS=${rp.expirySweepMs} (every other start: the service's default)` : 'not run'}.`,
    `- Locks, the same for every scenario: LOCK_TTL_MS=${s.lock.ttlMs}, LOCK_WAIT_MS=${s.lock.waitMs} (and DB_TIMEOUT_MS=${s.lock.waitMs}), LOCK_RETRY_DELAY_MS=${s.lock.retryDelayMs}, LOCK_RETRY_JITTER_MS=${s.lock.retryJitterMs}.`,
    '- orders/s counts 201 answers only; latencies are of the 201s only (p50/p99/max, ms); GET /health/live counts 200s (req/s). The no-lock mode is the bare peer with STOCK_LOCKING=database (one process): no Redis lock, the hold is spent inside the PostgreSQL statement with the segment row locked.',
    `- Command: \`${report.command}\``,
    '',
  ];
}

/** Every failed check of every failed scenario, with the scenario's id. */
function failedChecks(report: BenchmarkReport) {
  return failed(report).flatMap((r) => r.verification.checks.filter((c) => !c.ok).map((c) => [r.id, c] as const));
}

/** The console's closing verdict: every scenario verified, or each failed check. */
export function verdictLines(report: BenchmarkReport): string[] {
  const bad = failed(report);
  if (bad.length > 0)
    return [
      '',
      `!!! ${bad.length} SCENARIO(S) FAILED !!!`,
      ...failedChecks(report).map(([id, c]) => `!!! ${id}: ${c.name}: ${c.detail}`),
    ];
  return [
    `All ${report.scenarios.length} scenarios verified (I1 stock conserved, no segment < 0, I2 no user twice, I3 no false sold-out, no 5xx; GET /health/live: every answer 200${
      returnsOf(report).length > 0
        ? '; the sale with returns: statuses as answered, every returned unit resold exactly once'
        : ''
    }).`,
  ];
}
