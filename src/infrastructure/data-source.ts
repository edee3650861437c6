// TypeORM DataSource options, shared by the service and the migration CLI (`npm run migration:run`).
import { join } from 'node:path';
import { Client, ClientConfig } from 'pg';
import { DataSource, DataSourceOptions } from 'typeorm';

export const MIGRATIONS_GLOB = join(__dirname, '..', '..', 'migrations', '*.{ts,js}');

/**
 * A pg client that never crashes the process with an unhandled 'error' event. pg-pool takes its own
 * listener off a client when it hands it out, and TypeORM puts its listener on one microtask later;
 * a connection whose last bytes hold both its ReadyForQuery and a FATAL (PostgreSQL shutting down
 * as it finished connecting) emits that error in between, with no listener, and Node ends the
 * process (seen in test/faults/postgres-outage). The error itself still reaches the pool and
 * TypeORM through their own listeners: the client is no longer queryable, so the pool drops it on
 * release.
 */
export class GuardedClient extends Client {
  constructor(config?: string | ClientConfig) {
    super(config);
    this.on('error', () => undefined);
  }
}

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
      Client: GuardedClient,
      statement_timeout: timeoutMs,
      query_timeout: timeoutMs + 1000,
      connectionTimeoutMillis: timeoutMs,
      idle_in_transaction_session_timeout: timeoutMs * 2,
    },
  };
}

// For the TypeORM CLI: reads DATABASE_URL.
export default new DataSource(dataSourceOptions(process.env.DATABASE_URL ?? 'postgres://localhost/flashsale'));
