// One service per data folder. A second start on the DATA_DIR of a running one would meet its
// embedded PostgreSQL's lock, and all PostgreSQL's words could say is to stop that PostgreSQL, which
// the running service still uses. So a start claims the folder before it starts any server there
// (a file naming its pid and port), and a second start is told that the service already runs, and
// where.
import { mkdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { HttpConfig } from '../config/app-config';
import { EmbeddedServerError } from './postgres-placement';
import { serviceUrl } from './start-links';

/** A service started from this data folder is running. */
export class AlreadyRunningError extends EmbeddedServerError {}

interface Claim {
  pid: number;
  port: number;
  host: string;
}

const FILE = 'service.json';

/**
 * Claims `dataDir` for this process and returns what gives it up (also done when the process
 * exits); a claim whose process is gone is taken over. `isService` tells whether a pid is a running
 * service (a pid may have been given to another program since).
 */
export function claimDataDir(
  dataDir: string,
  http: Pick<HttpConfig, 'port' | 'host'>,
  isService: (pid: number) => boolean = isServiceProcess,
): () => void {
  mkdirSync(dataDir, { recursive: true });
  const file = join(dataDir, FILE);
  const mine: Claim = { pid: process.pid, port: http.port, host: http.host };
  for (let attempt = 0; ; attempt++) {
    try {
      writeFileSync(file, `${JSON.stringify(mine)}\n`, { flag: 'wx' });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const held = readClaim(file);
    if (held && held.pid !== process.pid && isService(held.pid)) {
      const url = serviceUrl(held);
      throw new AlreadyRunningError(
        `the service is already running on port ${held.port} (pid ${held.pid}), started from this data folder ` +
          `(${dataDir}): use it at ${url}, or stop it first (Ctrl-C where it runs, or kill ${held.pid}); ` +
          'a second service beside it needs its own DATA_DIR and PORT',
      );
    }
    // Left by a service that is gone (killed, crashed): taken over, once; a start racing us for it wins.
    if (attempt > 0) throw new AlreadyRunningError(`another start claimed ${file} meanwhile; try again`);
    rmSync(file, { force: true });
  }
  const release = () => {
    if (readClaim(file)?.pid === process.pid) rmSync(file, { force: true });
    process.removeListener('exit', release);
  };
  process.on('exit', release);
  return release;
}

function readClaim(file: string): Claim | undefined {
  try {
    const c = JSON.parse(readFileSync(file, 'utf8')) as Partial<Claim>;
    if (typeof c.pid === 'number' && typeof c.port === 'number' && typeof c.host === 'string') return c as Claim;
  } catch {
    /* unreadable: as good as none */
  }
  return undefined;
}

/** Alive, and (where /proc tells) running the same script as this process. */
function isServiceProcess(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    const cwd = readlinkSync(`/proc/${pid}/cwd`);
    const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return args.some((arg) => resolve(cwd, arg) === process.argv[1]);
  } catch {
    return true;
  }
}
