// A run's report, as data (report.json) and as markdown (report.md): the faults by kind with their
// recovery times, the operations by outcome, the lock's own failures, every check with its anomaly
// count, the anomalies themselves, and liveness after the last heal.
import { cpus } from 'node:os';
import type { RunResult } from './run';

export interface Report {
  command: string;
  seed: number;
  world: string;
  links: string;
  network: RunResult['network'];
  clocks: string;
  plant: string | null;
  faultSeconds: number;
  durationSeconds: number;
  machine: string;
  faults: Record<string, { count: number; failed: number; recoveryMs: { median: number | null; max: number | null } }>;
  skipped: Array<{ kind: string; why: string }>;
  /** What each Cluster failover lost: the segment locks and fencing counters its replica did not have. */
  failovers: Array<Record<string, unknown>>;
  operations: Record<string, Record<string, number>>;
  refusals: Record<string, number>;
  unknown: RunResult['check']['unknown'];
  lock: RunResult['lock'];
  checks: RunResult['check']['checks'];
  anomalies: { count: number; first: RunResult['check']['anomalies'] };
  liveness: RunResult['liveness'];
}

const median = (xs: number[]) => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};

export function buildReport(r: RunResult, command: string): Report {
  const faults: Report['faults'] = {};
  for (const p of r.played) {
    const row = (faults[p.fault.kind] ??= { count: 0, failed: 0, recoveryMs: { median: null, max: null } });
    row.count++;
    if (p.error) row.failed++;
  }
  for (const kind of Object.keys(faults)) {
    const times = r.played
      .filter((p) => p.fault.kind === kind && p.recoveryMs !== undefined)
      .map((p) => p.recoveryMs as number);
    faults[kind].recoveryMs = { median: median(times), max: times.length ? Math.max(...times) : null };
  }
  return {
    command,
    seed: r.options.seed,
    world: r.options.world,
    links: r.mode === 'netns' ? 'network namespaces, cut by nft' : 'per-link TCP proxies (no namespaces)',
    network: r.network,
    clocks: r.fakeTime ? 'libfaketime (services); TTLs shifted (Redis)' : 'real',
    plant: r.options.plant ?? null,
    faultSeconds: Math.round(r.options.lengthMs / 1000),
    durationSeconds: Math.round(r.durationMs / 1000),
    machine: `${cpus().length} cores`,
    faults,
    skipped: r.skipped,
    failovers: r.played
      .filter((p) => p.fault.kind === 'cluster-failover' && p.result)
      .map((p) => p.result as Record<string, unknown>),
    operations: r.operations,
    refusals: r.codes,
    unknown: r.check.unknown,
    lock: r.lock,
    checks: r.check.checks,
    anomalies: { count: r.check.anomalies.length, first: r.check.anomalies.slice(0, 200) },
    liveness: r.liveness,
  };
}

export function markdown(rep: Report): string {
  const lines: string[] = [];
  const verdict = rep.anomalies.count === 0 ? 'no anomaly' : `${rep.anomalies.count} anomalies`;
  lines.push(`# Nemesis run: seed ${rep.seed}, ${rep.faultSeconds} s of faults, ${verdict}`, '');
  lines.push(`\`${rep.command}\``, '');
  lines.push(
    `World: ${rep.world === 'cluster' ? 'a Redis Cluster (3 masters, a replica each)' : 'three independent Redis masters (Redlock quorum)'}, PostgreSQL, three service processes; links: ${rep.links}; clocks: ${rep.clocks}${rep.plant ? `; **planted bug: ${rep.plant}**` : ''}. ${rep.machine}, ${rep.durationSeconds} s in all.`,
    '',
  );
  lines.push(
    '## Faults',
    '',
    '| kind | played | failed to play | recovery median (ms) | recovery max (ms) |',
    '|---|--:|--:|--:|--:|',
  );
  for (const [k, f] of Object.entries(rep.faults).sort())
    lines.push(`| ${k} | ${f.count} | ${f.failed} | ${f.recoveryMs.median ?? '-'} | ${f.recoveryMs.max ?? '-'} |`);
  for (const s of rep.skipped) lines.push('', `Not played: ${s.kind} (${s.why}).`);
  lines.push('', 'Recovery: from the end of a fault until every service process answers `GET /health` 200.', '');
  for (const f of rep.failovers)
    lines.push(
      `- Failover: master ${String(f.master)} killed, ${String(f.promoted)} promoted before it had ${String(f.locksLost)} segment locks and ${String(f.countersBehind)} fencing counters of its master.`,
    );
  if (rep.failovers.length) lines.push('');
  lines.push('## Operations', '', '| operation | ok | refused | failed | unknown |', '|---|--:|--:|--:|--:|');
  for (const [f, o] of Object.entries(rep.operations).sort())
    lines.push(`| ${f} | ${o.ok ?? 0} | ${o.refused ?? 0} | ${o.failed ?? 0} | ${o.unknown ?? 0} |`);
  const u = rep.unknown;
  lines.push(
    '',
    `Orders left unknown: ${u.orders.total} (${u.orders.tookEffect} took effect, ${u.orders.didNot} did not); payments unknown: ${u.pays}; cancels unknown: ${u.cancels}.`,
    '',
  );
  const top = Object.entries(rep.refusals)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 12);
  if (top.length)
    lines.push('Most frequent answers other than ok: ' + top.map(([k, n]) => `${k} ×${n}`).join(', ') + '.', '');
  lines.push("## The lock's own failures", '');
  const lost = Object.entries(rep.lock.holdsLost);
  lines.push(
    `- Segment lock holds that outlived their lease (their extension failed, so another holder could take the lock): ${lost.reduce((a, [, n]) => a + n, 0)}${lost.length ? ` (${lost.map(([k, n]) => `${k} ${n}`).join(', ')})` : ''}.`,
    `- Sale writes PostgreSQL refused for a stale fencing token: ${rep.lock.staleWritesRefused}; of them ${rep.lock.refusedAfter.ownPause} within 5 s after a pause of the refusing process (it woke holding a lapsed lock that another holder had taken and written under: two holders of one segment lock, the older refused), ${rep.lock.refusedAfter.redisLoss} within 30 s of a Redis master losing its keys (a token counter set back, raised again by the refusal), ${rep.lock.refusedAfter.other} otherwise.`,
    '',
  );
  lines.push('## Checks', '', '| check | anomalies | looked at |', '|---|--:|---|');
  for (const c of rep.checks) lines.push(`| ${c.name} | ${c.anomalies} | ${c.looked} |`);
  lines.push('');
  if (rep.anomalies.count > 0) {
    lines.push('## Anomalies', '');
    for (const a of rep.anomalies.first.slice(0, 50)) lines.push(`- ${a.check}: ${a.message}`);
    if (rep.anomalies.count > 50) lines.push(`- ... and ${rep.anomalies.count - 50} more (report.json)`);
    lines.push('');
  }
  lines.push('## Liveness after the last heal', '');
  for (const [s, ms] of Object.entries(rep.liveness.healthyAfterMs))
    lines.push(`- ${s} answered \`GET /health\` 200 after ${ms ?? 'never'} ms (bound ${rep.liveness.boundMs} ms).`);
  lines.push(
    `- The sale ${rep.liveness.soldOut ? `sold out ${Math.round((rep.liveness.soldOutMs ?? 0) / 1000)} s after the heal` : 'did not sell out'}.`,
    '',
  );
  return lines.join('\n');
}
