// How the HTTP server treats its clients' connections: how long a request may take to arrive, how
// many connections one address may hold, and how a refused body is answered so the client can read
// the answer. Node's http server enforces the timeouts (checked every CHECK_INTERVAL_MS); the rest
// is done here, on the server and on Fastify's hooks.
import { STATUS_CODES, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { compile } from '@fastify/proxy-addr';
import type { FastifyInstance } from 'fastify';
import type { HttpConfig } from '../config/app-config';
import { toErrorResponse } from '../common/all-exceptions.filter';
import { HeadersTooLargeError, RequestTimeoutError, ValidationFailedError } from '../common/domain-errors';

/**
 * Longer than the idle timeout of the proxies in front (60 s for AWS ALB and for nginx's upstream
 * keepalive), so a proxy never sends a request on a connection the service is closing at that
 * moment (Fastify's default, stated because it matters). Shutdown does not wait for it: idle
 * connections are closed at once (graceful-shutdown.ts).
 */
export const KEEP_ALIVE_TIMEOUT_MS = 72_000;

/**
 * How often Node looks for requests past HEADERS_TIMEOUT_MS or REQUEST_TIMEOUT_MS (its default,
 * 30 s, would let a stalled client hold its connection for up to 30 s more than the timeout).
 */
export const CHECK_INTERVAL_MS = 1000;

/** Most bytes of a refused body read and dropped after the answer, so that the client reads it. */
export const DRAIN_MAX_BYTES = 32 * 1024 * 1024;

/**
 * The server options of Fastify (and of Node's http server under it) for these settings.
 * `timedOut` is called for each connection cut by a timeout.
 */
export function serverOptions(
  config: Pick<HttpConfig, 'headersTimeoutMs' | 'requestTimeoutMs'>,
  timedOut: () => void = () => undefined,
) {
  return {
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
    clientErrorHandler: clientErrorHandler(timedOut),
    // Fastify sets the server's requestTimeout from its own option, so it is given here.
    requestTimeout: config.requestTimeoutMs,
    http: { headersTimeout: config.headersTimeoutMs, connectionsCheckingInterval: CHECK_INTERVAL_MS },
  };
}

/**
 * Answers what Node refuses before a request exists (too slow, headers too large, not HTTP) in the
 * service's error shape, then closes the connection. A reset needs no answer.
 */
export function clientErrorHandler(timedOut: () => void) {
  return (err: NodeJS.ErrnoException, socket: Socket): void => {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    const refusal =
      err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? new RequestTimeoutError()
        : err.code === 'HPE_HEADER_OVERFLOW'
          ? new HeadersTooLargeError()
          : new ValidationFailedError('malformed HTTP request');
    if (refusal instanceof RequestTimeoutError) timedOut();
    const { body } = toErrorResponse(refusal);
    const text = JSON.stringify(body);
    // Not after an answer already on its way (a refused body being drained): the client has it.
    const answering = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (socket.writable && !answering?.headersSent)
      socket.write(
        `HTTP/1.1 ${body.statusCode} ${STATUS_CODES[body.statusCode]}\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
      );
    socket.destroy();
  };
}

/**
 * Closes a new connection at once when its address already holds `max` (0: no cap). Connections
 * from the trusted proxies are not counted: every client behind them shares their address.
 */
export function capConnectionsPerAddress(
  server: Server,
  max: number,
  trustProxy: string[] | undefined,
  refused: () => void,
): void {
  if (max === 0) return;
  const trusted = trustProxy ? compile(trustProxy) : () => false;
  const open = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined || trusted(address, 0)) return;
    const count = open.get(address) ?? 0;
    if (count >= max) {
      refused();
      socket.destroy();
      return;
    }
    open.set(address, count + 1);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left === 0) open.delete(address);
      else open.set(address, left);
    });
  });
}

/**
 * A refused request whose body has not all arrived (over the size limit, or of a refused type):
 * closing the connection at once would reset it while the client is still sending, and a reset
 * discards the answer before the client reads it. So the connection is kept, the rest of the body
 * is read and dropped (Node does that for an unread body once the answer is sent), and the client
 * reads the answer as it ends its upload. A body larger than DRAIN_MAX_BYTES, or one still arriving
 * past REQUEST_TIMEOUT_MS (Node's own check), is cut.
 */
export function drainRefusedBodies(fastify: FastifyInstance): void {
  const draining = new WeakSet<object>();
  fastify.addHook('onSend', (request, reply, payload, done) => {
    if (reply.statusCode >= 400 && !request.raw.complete) {
      draining.add(request);
      reply.removeHeader('connection');
    }
    done(null, payload);
  });
  fastify.addHook('onResponse', (request, _reply, done) => {
    if (draining.has(request) && !request.raw.complete) {
      const socket = request.raw.socket;
      let dropped = 0;
      request.raw.on('data', (chunk: Buffer) => {
        dropped += chunk.length;
        if (dropped > DRAIN_MAX_BYTES) socket.destroy();
      });
      request.raw.resume();
    }
    done();
  });
}
