// The same load on one redis-server, a Redlock quorum of three and a 3-master Redis Cluster: the
// rows with their ratios to the one redis-server (also written into latest.json as redisSetups) and
// their console and latest.md tables.
import type { RedisServerCosts } from '../costs';
import { pick } from '../pick';
import { REDIS_SETUPS } from '../types';
import type { BenchmarkReport, RedisSetup, RedisSetupRow, RedisSetupsSection, ScenarioResult } from '../types';
import { inGroup } from './find';
import { batchName, ms, rate, ratioOf, SETUP_NAME, times } from './format';

/** The Redis setups group as rows (by ORDER_BATCH_MAX, then single, quorum, cluster), with ratios to the one redis-server; null when it did not run. */
export function redisSetupsSection(report: BenchmarkReport): RedisSetupsSection | null {
  const found = inGroup(report, 'redis-setups');
  if (found.length === 0) return null;
  const batches = [...new Set(found.map((r) => r.batchMax))].sort((a, b) => (b ?? Infinity) - (a ?? Infinity));
  const at = (batchMax: number | null, setup: RedisSetup) =>
    found.find((r) => r.batchMax === batchMax && (r.redis ?? 'single') === setup);
  const redisOf = (p: RedisServerCosts['perUnit']) => pick(p, 'redisScripts', 'redisCommands', 'redisCpuUs');
  const perOrder = (r: ScenarioResult | undefined) => (r?.costs ? redisOf(r.costs.perUnit) : null);
  const rows = batches.flatMap((batchMax): RedisSetupRow[] => {
    const single = at(batchMax, 'single');
    const base = perOrder(single);
    return REDIS_SETUPS.flatMap((setup) => {
      const r = at(batchMax, setup);
      if (!r) return [];
      const cost = perOrder(r);
      const row: RedisSetupRow = {
        setup,
        ...pick(r, 'id', 'batchMax', 'status', 'ordersPerSec'),
        p99Ms: r.latency201Ms?.p99 ?? null,
        perOrder: cost,
        perServer: r.costs?.redisServers?.map((x) => ({ server: x.server, ...redisOf(x.perUnit) })) ?? null,
        vsSingle: {
          ordersPerSec: ratioOf(r.ordersPerSec, single?.ordersPerSec),
          p99: ratioOf(r.latency201Ms?.p99, single?.latency201Ms?.p99),
          redisScripts: ratioOf(cost?.redisScripts, base?.redisScripts),
          redisCommands: ratioOf(cost?.redisCommands, base?.redisCommands),
          redisCpuUs: ratioOf(cost?.redisCpuUs, base?.redisCpuUs),
        },
      };
      return [row];
    });
  });
  const s = report.settings;
  // command: how the run was started, to repeat it.
  return { command: report.command, workers: s.speedWorkers, segments: s.speedSegments, holdMs: 0, rows };
}

/** Per-server calls of a quorum or cluster: round trips (scripts) per order on each, in the setup's order. */
function perServerCell(r: RedisSetupRow): string {
  return r.perServer ? r.perServer.map((x) => x.redisScripts.toFixed(2)).join(' / ') : '-';
}

/** latest.md's section of the Redis setups; none when the group did not run. */
export function redisSetupsMarkdown(report: BenchmarkReport): string[] {
  const x = redisSetupsSection(report);
  if (!x) return [];
  return [
    `## Redis setups (hold 0, ${x.segments} segments, WORKERS=${x.workers})`,
    '',
    'The same load on three Redis setups, each its own service start, each verified from PostgreSQL like every other scenario: ' +
      "**one redis-server** (REDIS_URL; every other scenario's setup), a **Redlock quorum of 3** (REDIS_LOCK_URLS: the bench's redis-server and two more started for this group, REDIS_URL the first of them: hints and the user lock stay on one server) and a **Redis Cluster of 3 masters** (REDIS_CLUSTER_NODES alone, started for this group). " +
      'Redis calls and Redis CPU are per order **summed over every server of the setup**: INFO commandstats and INFO cpu of each one. Per server: EVAL/EVALSHA calls (round trips) per order on each master, in the order of REDIS_LOCK_URLS / REDIS_CLUSTER_NODES; on the quorum every lock operation goes to all three, on the cluster a segment lock goes to the master of its slot. ' +
      'Ratios are to the one redis-server at the same ORDER_BATCH_MAX.',
    '',
    '| setup | ORDER_BATCH_MAX | orders/s | vs single | p99 | Redis calls (scripts) / order | vs single | Redis commands / order | Redis CPU µs / order | vs single | scripts / order per server | verified |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|',
    ...x.rows.map((r) => {
      const c = r.perOrder;
      return `| ${SETUP_NAME[r.setup]} (\`${r.id}\`) | ${batchName(r.batchMax)} | **${rate(r.ordersPerSec)}** | ${times(r.vsSingle.ordersPerSec)} | ${ms(r.p99Ms)} ms | ${c ? c.redisScripts.toFixed(2) : '-'} | ${times(r.vsSingle.redisScripts)} | ${c ? c.redisCommands.toFixed(2) : '-'} | ${c ? ms(c.redisCpuUs) : '-'} | ${times(r.vsSingle.redisCpuUs)} | ${perServerCell(r)} | ${r.status === 'ok' ? 'ok' : '**FAILED**'} |`;
    }),
    '',
    `Command: \`${x.command}\``,
    '',
  ];
}
