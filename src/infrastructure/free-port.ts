// Free TCP ports on loopback for servers this project starts itself (embedded PostgreSQL and
// redis-server, the tests' and the benchmark's services and peers). FLASHSALE_PORTS=LOW-HIGH
// confines them to a range, for a machine whose firewall or neighbours leave only that one.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { PortTakenError } from './postgres-placement';

/** Tries a server on ports we choose: the port asked for, or free ones. */
const TRIES = 5;

/**
 * Runs `start` on `asked`, or on a free port. A free port is only free when it is handed out: by the
 * time a server listens there, another process may hold it. So a port this process chose is chosen
 * again, up to TRIES times; a port the caller asked for is not.
 */
export async function onFreePort<T>(asked: number | undefined, start: (port: number) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start(asked ?? (await freePort()));
    } catch (err) {
      if (asked !== undefined || !(err instanceof PortTakenError) || attempt >= TRIES) throw err;
    }
  }
}

/**
 * A port no server listens on now, below the kernel's ephemeral range when that leaves room: the
 * ports of that range are also handed to outgoing connections (each PostgreSQL or Redis client
 * socket takes one), so a port chosen there can be taken by any busy process in the moment before
 * the server binds it. Below the range only an explicit bind takes a port. Elsewhere, or when the
 * range starts too low, the kernel picks one (port 0).
 */
export async function freePort(): Promise<number> {
  const confined = confinedPorts();
  if (confined) return freeIn(confined);
  const below = ephemeralLow();
  if (below - LOWEST > 1000) {
    for (let i = 0; i < 20; i++) {
      const port = LOWEST + Math.floor(Math.random() * (below - LOWEST));
      if (!FETCH_REFUSES.has(port) && (await listenOn(port)) !== null) return port;
    }
  }
  for (let i = 0; i < 20; i++) {
    const port = await listenOn(0);
    if (port === null) break;
    if (!FETCH_REFUSES.has(port)) return port;
  }
  throw new Error('no free TCP port on 127.0.0.1');
}

export interface PortRange {
  low: number;
  high: number;
}

/** The range FLASHSALE_PORTS (`LOW-HIGH`, both included) confines freePort to; null when unset. */
export function confinedPorts(value = process.env.FLASHSALE_PORTS): PortRange | null {
  if (value === undefined || value.trim() === '') return null;
  const m = /^\s*(\d+)\s*-\s*(\d+)\s*$/.exec(value);
  const [low, high] = [Number(m?.[1]), Number(m?.[2])];
  if (!m || low < 1 || high > 65535 || low > high)
    throw new Error(
      `FLASHSALE_PORTS must be LOW-HIGH with 1 <= LOW <= HIGH <= 65535 (e.g. 20000-20999), got "${value}"`,
    );
  return { low, high };
}

/** A port of the range no server listens on now, looked for from a random place so that callers at once rarely meet. */
async function freeIn({ low, high }: PortRange): Promise<number> {
  const size = high - low + 1;
  const from = Math.floor(Math.random() * size);
  for (let i = 0; i < size; i++) {
    const port = low + ((from + i) % size);
    if (!FETCH_REFUSES.has(port) && (await listenOn(port)) !== null) return port;
  }
  throw new Error(`no free TCP port on 127.0.0.1 in FLASHSALE_PORTS ${low}-${high}`);
}

/**
 * The ports fetch() refuses to connect to (the Fetch standard's "bad ports"; Node's fetch says "bad
 * port"): never handed out, as the benchmark and the specs call the servers they start with fetch.
 * A service the benchmark started on 10080 once failed its run this way.
 */
export const FETCH_REFUSES: ReadonlySet<number> = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110,
  111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532,
  540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061,
  6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
]);

/** The least port freePort hands out below the ephemeral range (above the well-known and most registered ones). */
const LOWEST = 10_000;

/** The first port of Linux's ephemeral range; 0 where it cannot be read (then port 0 is used). */
export function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) ? low : 0;
  } catch {
    return 0;
  }
}

/** Listens on `port` of loopback and closes at once: the port it got, or null when it was taken. */
function listenOn(port: number): Promise<number | null> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', () => resolve(null));
    srv.listen(port, '127.0.0.1', () => {
      const address = srv.address();
      const got = typeof address === 'object' && address ? address.port : null;
      srv.close(() => resolve(got));
    });
  });
}
