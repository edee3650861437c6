// What each order and each refusal cost the target's CPU, Redis and PostgreSQL, per unit, as the
// console and latest.md show it (bench/costs.ts reads the figures).
import type { ScenarioCosts } from '../costs';
import type { BenchmarkReport } from '../types';
import { ms } from './format';

/** Per-unit cost cells: target CPU µs, Redis scripts, Redis commands, Redis CPU µs, PG statements, PG write transactions, WAL bytes, PG CPU µs. */
function costCells(c: ScenarioCosts): string[] {
  const p = c.perUnit;
  const calls = (n: number) => n.toFixed(2);
  return [
    ms(p.targetCpuUs),
    calls(p.redisScripts),
    calls(p.redisCommands),
    ms(p.redisCpuUs),
    p.pgStatements == null ? '-' : p.pgStatements.toFixed(3),
    p.pgWriteTransactions.toFixed(3),
    p.pgWalBytes.toFixed(0),
    ms(p.pgCpuUs),
  ];
}

/** latest.md's costs table: every scenario that read them, with what each column counts. */
export function costsMarkdown(report: BenchmarkReport): string[] {
  const rows = report.scenarios.filter((r) => r.costs);
  if (rows.length === 0) return [];
  return [
    '## Costs per order and per refusal',
    '',
    "Read just before each scenario's load and again once its target went quiet, then divided by the orders PostgreSQL holds for the scenario's product (unit: order; the sale's figures carry its 410s too) or by the answers (unit: answer: the sold-out product's 410s, GET /health/live). " +
      "**service CPU**: user + system time of the target's processes (the service's primary and workers, or the peer), from /proc. " +
      "**Redis scripts**: EVAL/EVALSHA calls, each one round trip (every Redis call of the service's order path is a script; the bare peer also sends plain commands). **Redis commands**: every command INFO commandstats counted, those run inside scripts included. **Redis CPU**: INFO cpu, the whole server. Calls and CPU are summed over every Redis server of the scenario's setup (the three masters of a Redlock quorum, `-rq`, or of a Redis Cluster, `-rc`). " +
      '**PG statements**: every statement PostgreSQL ran in the database, read-only ones included (pg_stat_statements; - where it is not loaded); **PG write transactions**: transaction ids handed out (read-only statements take none; they show in PG CPU only); **WAL bytes**: the WAL insert position; **PG CPU**: every PostgreSQL process, from /proc (a PostgreSQL on another host: -). ' +
      "The machine's 2 cores are shared by the load generator, the target, Redis and PostgreSQL, so CPU per unit includes what contention costs (busy locks retried, context switches).",
    '',
    '| scenario | unit | units | service CPU µs | Redis scripts | Redis commands | Redis CPU µs | PG statements | PG write transactions | WAL bytes | PG CPU µs |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
    ...rows.map((r) => `| ${r.id} | ${r.costs!.unit} | ${r.costs!.units} | ${costCells(r.costs!).join(' | ')} |`),
    '',
  ];
}
