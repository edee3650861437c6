// Applies pending migrations under a PostgreSQL advisory lock, so concurrent starts do not race.
import { DataSource } from 'typeorm';
import { dataSourceOptions } from './data-source';

// Any fixed 64-bit number; it names this project's migration lock.
const MIGRATION_LOCK_KEY = '7461726966666c61';

export async function runMigrations(databaseUrl: string): Promise<string[]> {
  const ds = new DataSource({ ...dataSourceOptions(databaseUrl, { poolSize: 2, timeoutMs: 60_000 }) });
  await ds.initialize();
  const lockRunner = ds.createQueryRunner();
  try {
    await lockRunner.connect();
    await lockRunner.query(`SELECT pg_advisory_lock(x'${MIGRATION_LOCK_KEY}'::bigint)`);
    try {
      const applied = await ds.runMigrations({ transaction: 'each' });
      return applied.map((m) => m.name);
    } finally {
      await lockRunner.query(`SELECT pg_advisory_unlock(x'${MIGRATION_LOCK_KEY}'::bigint)`);
    }
  } finally {
    await lockRunner.release();
    await ds.destroy();
  }
}
