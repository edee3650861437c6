// TypeORM DataSource options, shared by the service and the migration CLI (`npm run migration:run`).
import { join } from 'node:path';
import { DataSource, DataSourceOptions } from 'typeorm';

export const MIGRATIONS_GLOB = join(__dirname, '..', '..', 'migrations', '*.{ts,js}');

export function dataSourceOptions(
  url: string,
  opts: { poolSize?: number; timeoutMs?: number } = {},
): DataSourceOptions {
  const timeoutMs = opts.timeoutMs ?? 5000;
  return {
    type: 'postgres',
    url,
    // Every query is SQL; the migrations are the schema, so there are no entity classes to keep.
    entities: [],
    migrations: [MIGRATIONS_GLOB],
    migrationsTableName: 'migrations',
    synchronize: false,
    logging: false,
    poolSize: opts.poolSize ?? 20,
    // Fail fast when PostgreSQL is unreachable or stuck instead of queueing requests forever.
    connectTimeoutMS: timeoutMs,
    extra: {
      statement_timeout: timeoutMs,
      query_timeout: timeoutMs + 1000,
      connectionTimeoutMillis: timeoutMs,
      idle_in_transaction_session_timeout: timeoutMs * 2,
    },
  };
}

// For the TypeORM CLI: reads DATABASE_URL.
export default new DataSource(dataSourceOptions(process.env.DATABASE_URL ?? 'postgres://localhost/flashsale'));
