// Asks the kernel for a free TCP port on loopback.
import { createServer } from 'node:net';
import { PortTakenError } from './postgres-placement';

/** Tries a server on ports we choose: the port asked for, or free ones. */
const TRIES = 5;

/**
 * Runs `start` on `asked`, or on a free port. A free port is only free when it is handed out: by the
 * time a server listens there, another process (or an outgoing connection, which takes its local
 * port from the same range) may hold it. So a port this process chose is chosen again, up to TRIES
 * times; a port the caller asked for is not.
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

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      srv.close(() => resolve(port));
    });
  });
}
