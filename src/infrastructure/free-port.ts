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
      if ((await listenOn(port)) !== null) return port;
    }
  }
  const port = await listenOn(0);
  if (port === null) throw new Error('no free TCP port on 127.0.0.1');
  return port;
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
    if ((await listenOn(port)) !== null) return port;
  }
  throw new Error(`no free TCP port on 127.0.0.1 in FLASHSALE_PORTS ${low}-${high}`);
}

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
