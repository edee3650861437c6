// What one order (or one refusal) costs Redis (INFO commandstats, INFO cpu; summed over every server
// of the Redis setup and kept per server), PostgreSQL (write transactions, WAL bytes, CPU) and the
// target's processes, read around a scenario. Not read: pg_stat_database's xact_commit, which
// PostgreSQL publishes up to 10 s late; transaction ids and the WAL position have no such delay.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Redis from 'ioredis';
import { Client } from 'pg';
import { startEmbeddedPostgres } from '../src/infrastructure/embedded-postgres';
import { childrenOf } from '../harness/launcher';
import { addCounts } from './load';
import { pick } from './pick';

/** Linux reports process times in USER_HZ ticks, 100 per second on every architecture Node runs on. */
const USER_HZ = 100;

/** Scripts are one round trip each; every other command counted by Redis may have run inside one. */
const SCRIPT_COMMANDS = new Set(['eval', 'evalsha', 'eval_ro', 'evalsha_ro', 'fcall', 'fcall_ro']);
/** The probe's own commands, left out of the counts. */
const PROBE_COMMANDS = new Set(['info']);

/** Calls per command name, as INFO commandstats counts them (commands run inside scripts included), and CPU seconds. */
type RedisReading = { redisCalls: Record<string, number>; redisCpuS: number };
/** One Redis server's readings; `server`: its redis:// URL. */
export type RedisServerReading = RedisReading & { server: string };

/** The readings around a scenario; the Redis ones summed over every server of the setup. */
export interface CostSnapshot extends RedisReading {
  /** Date.now() when it was read. */
  atMs: number;
  /** Each server of the setup (one for a single redis-server; absent in snapshots made by hand before setups existed). */
  redisServers?: RedisServerReading[];
  /** The next transaction id PostgreSQL will hand out: write transactions take one, read-only ones none. */
  pgNextXid: number;
  /** Statements PostgreSQL ran in this database (pg_stat_statements; read-only ones too), the probe's own left out; null when the extension is not loaded. */
  pgStatements?: number | null;
  pgWalBytes: number;
  /** null when PostgreSQL is not a process tree this machine can see. */
  pgCpuS: number | null;
  /** The target's processes (the service's primary and workers, or a peer); null without /proc. */
  targetCpuS: number | null;
}

export type RedisServerCosts = NonNullable<ReturnType<typeof serverDeltas>>[number];

/** `cmdstat_<name>:calls=N,...` lines of INFO commandstats; subcommands keep their `name|sub` form. */
export function parseCommandStats(info: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) out[m[1]] = Number(m[2]);
  return out;
}

/** Seconds of CPU from INFO cpu: user and system time of the whole server, every thread. */
export function parseRedisCpu(info: string): number {
  const field = (name: string) => Number(info.match(new RegExp(`^${name}:([\\d.]+)`, 'm'))?.[1] ?? NaN);
  return field('used_cpu_user') + field('used_cpu_sys');
}

/**
 * CPU seconds of a process from /proc/<pid>/stat: its own user and system time, plus that of its
 * children it has waited for (a PostgreSQL backend that exited mid-scenario lands there).
 */
export function processCpuS(stat: string): number {
  // The command name may hold spaces and parentheses; the fields after the last ')' do not.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // utime, stime, cutime, cstime are fields 14..17 of stat(5), i.e. 11..14 counted from the state field.
  return (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / USER_HZ;
}

/** /proc/<pid>/<file>, or null when /proc does not know the process. */
export function readProc(pid: number, file: 'stat' | 'status'): string | null {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'utf8');
  } catch {
    return null;
  }
}

/** A process and its children, summed; null when /proc does not know the process. */
export function treeCpuS(pid: number): number | null {
  const own = readProc(pid, 'stat');
  if (own === null) return null;
  return sum([own, ...childrenOf(pid).map((p) => readProc(p, 'stat'))].map((s) => (s === null ? 0 : processCpuS(s))));
}

/** Subtracts two call tables; commands the probe itself sends are left out. */
function callDelta(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, n] of Object.entries(after)) {
    const d = n - (before[name] ?? 0);
    if (d > 0 && !PROBE_COMMANDS.has(name)) out[name] = d;
  }
  return out;
}

const sum = (xs: number[]) => xs.reduce((s, n) => s + n, 0);
const per = (x: number, n: number) => (n > 0 ? x / n : 0);
const perUs = (x: number | null, n: number) => (x === null ? null : per(x * 1e6, n));
const minus = (a: number | null, b: number | null) => (a === null || b === null ? null : a - b);

/** Call tables and CPU summed over servers: what a setup of several servers costs as a whole. */
export function sumRedis(readings: RedisServerReading[]): RedisReading {
  return {
    redisCalls: addCounts(...readings.map((r) => r.redisCalls)),
    redisCpuS: sum(readings.map((r) => r.redisCpuS)),
  };
}

/** Redis calls and CPU between two readings of one server, or of a setup's servers summed. */
function redisDelta(b: RedisReading, a: RedisReading, units: number) {
  const byCommand = callDelta(b.redisCalls, a.redisCalls);
  /** EVAL/EVALSHA/FCALL calls: each one round trip. */
  const redisScripts = sum(Object.entries(byCommand).flatMap(([name, n]) => (SCRIPT_COMMANDS.has(name) ? [n] : [])));
  /** Every command Redis counted, those run inside scripts included. */
  const redisCommands = sum(Object.values(byCommand));
  const redisCpuS = a.redisCpuS - b.redisCpuS;
  return {
    byCommand,
    totals: { redisScripts, redisCommands, redisCpuS },
    perUnit: {
      redisScripts: per(redisScripts, units),
      redisCommands: per(redisCommands, units),
      redisCpuUs: per(redisCpuS * 1e6, units),
    },
  };
}

/** Per server, when both snapshots read the same several servers. */
function serverDeltas(before: CostSnapshot, after: CostSnapshot, units: number) {
  const b = before.redisServers;
  const a = after.redisServers;
  if (!a || !b || a.length < 2 || a.length !== b.length || a.some((x, i) => x.server !== b[i].server)) return undefined;
  return a.map((x, i) => ({ server: x.server, ...pick(redisDelta(b[i], x, units), 'totals', 'perUnit') }));
}

type Costs = ReturnType<typeof costDeltas>;
/** Totals over one scenario, and per unit: per order (201) or per answer where nothing sells (the refusals, GET /health/live). */
export type ScenarioCosts = Omit<Costs, 'perUnit'> & {
  /** pgStatements: absent in reports written before pg_stat_statements was read. */
  perUnit: Omit<Costs['perUnit'], 'pgStatements'> & { pgStatements?: number | null };
};

/** `units`: what the per-unit figures divide by. */
export function costDeltas(before: CostSnapshot, after: CostSnapshot, unit: 'order' | 'answer', units: number) {
  const redis = redisDelta(before, after, units);
  const redisServers = serverDeltas(before, after, units);
  const totals = {
    ...pick(redis.totals, 'redisScripts', 'redisCommands'),
    redisByCommand: redis.byCommand,
    redisCpuS: redis.totals.redisCpuS,
    pgWriteTransactions: after.pgNextXid - before.pgNextXid,
    /** Every statement, read-only ones included; null without pg_stat_statements (absent in reports written before it was read). */
    pgStatements: minus(after.pgStatements ?? null, before.pgStatements ?? null),
    pgWalBytes: after.pgWalBytes - before.pgWalBytes,
    pgCpuS: minus(after.pgCpuS, before.pgCpuS),
    targetCpuS: minus(after.targetCpuS, before.targetCpuS),
  };
  return {
    unit,
    units,
    /** Seconds from the first snapshot to the second (the load, then the wait until the target went quiet). */
    windowS: (after.atMs - before.atMs) / 1000,
    totals,
    perUnit: {
      ...redis.perUnit,
      pgWriteTransactions: per(totals.pgWriteTransactions, units),
      pgStatements: totals.pgStatements == null ? null : per(totals.pgStatements, units),
      pgWalBytes: per(totals.pgWalBytes, units),
      pgCpuUs: perUs(totals.pgCpuS, units),
      targetCpuUs: perUs(totals.targetCpuS, units),
    },
    // The Redis figures server by server, in the setup's order (a quorum's masters, a cluster's
    // masters); the totals above are their sums. Absent where only one server was read.
    ...(redisServers ? { redisServers } : {}),
  };
}

/**
 * Reads the snapshots, on the benchmark's own PostgreSQL connection and a Redis connection of its
 * own to every server of a Redis setup (one per setup: the bench's redis-server, a quorum's
 * masters, a cluster's masters, each read as a plain server: INFO is not a keyed command).
 */
export class CostProbe {
  private constructor(
    private readonly db: Client,
    private readonly redis: Array<{ url: string; client: Redis }>,
    /** PostgreSQL's postmaster on this machine, or null (another host, or no /proc). */
    private readonly postmasterPid: number | null,
  ) {}

  static async open(db: Client, urls: string[]): Promise<CostProbe> {
    const redis = urls.map((url) => ({ url, client: new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 }) }));
    try {
      await Promise.all(redis.map((r) => r.client.connect()));
    } catch (err) {
      for (const r of redis) r.client.disconnect();
      throw err;
    }
    const { rows } = await db.query('SELECT pg_backend_pid() AS pid');
    return new CostProbe(db, redis, postmasterOf(rows[0].pid as number));
  }

  async snapshot(targetPid: number): Promise<CostSnapshot> {
    // PostgreSQL first: the Redis reading is the cheaper one to take late.
    const { rows } = await this.db.query(
      `SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS next_xid,
              (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text AS wal`,
    );
    const pgStatements = await this.statements();
    const servers = await Promise.all(
      this.redis.map(async ({ url, client }) => {
        const [stats, cpu] = await Promise.all([client.info('commandstats'), client.info('cpu')]);
        return { server: url, redisCalls: parseCommandStats(stats), redisCpuS: parseRedisCpu(cpu) };
      }),
    );
    return {
      atMs: Date.now(),
      ...sumRedis(servers),
      redisServers: servers,
      pgNextXid: Number(rows[0].next_xid),
      pgStatements,
      pgWalBytes: Number(rows[0].wal),
      pgCpuS: this.postmasterPid === null ? null : treeCpuS(this.postmasterPid),
      targetCpuS: treeCpuS(targetPid),
    };
  }

  close(): void {
    for (const r of this.redis) r.client.disconnect();
  }

  /** pg_stat_statements' calls in this database (the probe's own statements left out), or null where it is not loaded. */
  private async statements(): Promise<number | null> {
    try {
      const { rows } = await this.db.query<{ n: string }>(
        `SELECT coalesce(sum(s.calls), 0)::text AS n FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
          WHERE d.datname = current_database() AND s.query NOT ILIKE '%pg_stat_statements%' AND s.query NOT ILIKE '%pg_current_snapshot%'`,
      );
      return Number(rows[0].n);
    } catch {
      return null;
    }
  }
}

/** The parent of our backend, if it is a PostgreSQL process this machine can see (a local server). */
function postmasterOf(backendPid: number): number | null {
  const stat = readProc(backendPid, 'stat');
  if (stat === null || !/^\d+ \(postgres/.test(stat)) return null;
  const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  const parent = readProc(ppid, 'stat');
  return parent !== null && /^\d+ \(postgres/.test(parent) ? ppid : null;
}

/**
 * The benchmark's own PostgreSQL: embedded, throwaway, with pg_stat_statements loaded so that the
 * costs count every statement, read-only ones too (a refusal's). Its data lives in `dir`.
 */
export function startBenchPostgres(dir: string): ReturnType<typeof startEmbeddedPostgres> {
  return startEmbeddedPostgres({
    dataDir: join(dir, 'pg'),
    database: 'flashsale_bench',
    persistent: false,
    settings: { shared_preload_libraries: 'pg_stat_statements' },
  });
}
