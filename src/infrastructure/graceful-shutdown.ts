// Graceful stop of one serving process: stop taking connections, let in-flight requests finish
// (closing keep-alive connections as they go idle), and only then close Redis and PostgreSQL.
import type { Server } from 'node:http';
import { Logger } from '@nestjs/common';
import type { INestApplication } from '@nestjs/common';

/** Longest wait for in-flight requests; below Docker's 10 s between SIGTERM and SIGKILL. */
export const SHUTDOWN_GRACE_MS = 8000;
/** Extra time for Nest's shutdown hooks (Redis QUIT, pool end) before the process gives up. */
const HOOKS_GRACE_MS = 5000;

const logger = new Logger('Shutdown');

/**
 * Closes the listening socket and resolves when every connection has ended. Node's close() alone
 * leaves keep-alive connections open (and serving) until their idle timeout, so requests that
 * arrive on them from now on are answered with `Connection: close`, and idle ones are closed as
 * soon as they go idle. After graceMs whatever is still open is cut.
 */
export async function drainHttp(server: Server, graceMs = SHUTDOWN_GRACE_MS): Promise<boolean> {
  server.on('request', (_req, res) => {
    res.shouldKeepAlive = false;
  });
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  // Not at once: the signal may be handled in the same turn of the event loop as reads of requests
  // that already arrived on keep-alive connections; such a connection still looks idle, and closing
  // it would reset a request the client sent before the signal. After setImmediate those reads have
  // been parsed, so their connections are busy and get answered (with Connection: close).
  setImmediate(() => server.closeIdleConnections());
  const sweep = setInterval(() => server.closeIdleConnections(), 20);
  let timer: NodeJS.Timeout | undefined;
  const cut = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => {
      server.closeAllConnections();
      resolve(false);
    }, graceMs);
  });
  try {
    return await Promise.race([closed.then(() => true), cut]);
  } finally {
    clearInterval(sweep);
    clearTimeout(timer);
  }
}

/**
 * On the first SIGTERM or SIGINT: drain HTTP, close the app (its shutdown hooks quit the Redis
 * clients and end the PostgreSQL pool, after the last request), run `after` (embedded servers of
 * the primary), exit 0. The one owner of these signals in a serving process: Nest's own
 * enableShutdownHooks() is not used, as it would close the app a second time and re-raise the
 * signal, ending the process with it instead of exit code 0.
 */
export function closeOnSignals(app: INestApplication, after: () => Promise<void> = () => Promise.resolve()): void {
  let stopping = false;
  const stop = async (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    logger.log(`${signal}: draining in-flight requests`);
    const watchdog = setTimeout(() => {
      logger.error('shutdown did not finish in time; exiting');
      process.exit(1);
    }, SHUTDOWN_GRACE_MS + HOOKS_GRACE_MS);
    watchdog.unref();
    const server = app.getHttpServer() as Server;
    if (!server.listening) {
      // Still starting (a cluster worker whose listen handle is in flight from the primary):
      // closing the server then crashes inside node:net. Nothing was served, so nothing to drain.
      logger.warn(`${signal} before this process was listening: exiting`);
      process.exit(0);
    }
    let code = 0;
    try {
      const drained = await drainHttp(server);
      if (!drained) logger.warn(`requests still open after ${SHUTDOWN_GRACE_MS} ms were cut`);
      await app.close();
      await after();
    } catch (err) {
      logger.error(`shutdown failed: ${(err as Error).message}`);
      code = 1;
    }
    process.exit(code);
  };
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => void stop(signal));
}
