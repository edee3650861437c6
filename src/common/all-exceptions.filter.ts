// The one place where failures become HTTP answers: { statusCode, code, message }, a Retry-After
// on 503s, and never a stack trace or an internal detail in the body.
import { ArgumentsHost, Catch, ExceptionFilter, HttpException, Logger, NotFoundException } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import {
  AlreadyOrderedError,
  CursorAheadError,
  DomainError,
  ERROR_STATUS,
  ErrorCode,
  MethodNotAllowedError,
  OutcomeUnknownError,
  UnavailableError,
} from './domain-errors';
import type { RouteMethods } from './route-methods';

export interface ErrorBody {
  statusCode: number;
  code: ErrorCode;
  message: string;
  /** With ALREADY_ORDERED, when known: the order the user holds. */
  orderId?: number;
  /** With CURSOR_AHEAD: the newest cursor of the event stream. */
  newest?: string;
}

const HTTP_CODES: Record<number, ErrorCode> = {
  400: 'VALIDATION_FAILED',
  401: 'UNAUTHENTICATED',
  404: 'NOT_FOUND',
  413: 'PAYLOAD_TOO_LARGE',
  415: 'UNSUPPORTED_MEDIA_TYPE',
};

/** Maps any thrown value to the status, body and Retry-After that the client gets. */
export function toErrorResponse(err: unknown, defaultRetryAfterS = 1): { body: ErrorBody; retryAfterS?: number } {
  if (err instanceof DomainError) {
    const statusCode = ERROR_STATUS[err.code];
    const retryAfterS = err.retryAfterS ?? (statusCode === 503 ? defaultRetryAfterS : undefined);
    const body: ErrorBody = { statusCode, code: err.code, message: err.message };
    if (err instanceof AlreadyOrderedError && err.orderId !== undefined) body.orderId = err.orderId;
    if (err instanceof CursorAheadError) body.newest = err.newest;
    return { body, retryAfterS };
  }
  if (err instanceof HttpException) {
    const statusCode = err.getStatus();
    const code =
      HTTP_CODES[statusCode] ??
      (statusCode === 503 ? 'UNAVAILABLE' : statusCode >= 500 ? 'INTERNAL' : 'VALIDATION_FAILED');
    const message = statusCode === 404 ? 'no such route' : statusCode >= 500 ? 'internal error' : err.message;
    return { body: { statusCode, code, message }, retryAfterS: statusCode === 503 ? defaultRetryAfterS : undefined };
  }
  if (isFrameworkClientError(err)) {
    return {
      body: {
        statusCode: err.statusCode,
        code: HTTP_CODES[err.statusCode] ?? 'VALIDATION_FAILED',
        message: err.message,
      },
    };
  }
  return { body: { statusCode: 500, code: 'INTERNAL', message: 'internal error' } };
}

/**
 * Fastify's own refusals of a request (body too large or not JSON, a malformed URL): FST_ codes
 * with a 4xx status, and messages about the request only. Anything else stays unexpected.
 */
function isFrameworkClientError(err: unknown): err is Error & { code: string; statusCode: number } {
  const e = err as { code?: unknown; statusCode?: unknown };
  return (
    err instanceof Error &&
    typeof e.code === 'string' &&
    e.code.startsWith('FST_') &&
    typeof e.statusCode === 'number' &&
    e.statusCode >= 400 &&
    e.statusCode < 500
  );
}

/** The part of Nest's HTTP adapter that answers an error, whichever platform is under it. */
export type ErrorReplier = Pick<HttpAdapterHost['httpAdapter'], 'setHeader' | 'reply'>;

export function sendError(http: ErrorReplier, res: unknown, err: unknown, retryAfterS?: number): void {
  const out = toErrorResponse(err, retryAfterS);
  if (err instanceof MethodNotAllowedError) http.setHeader(res, 'Allow', err.allow.join(', '));
  // Every 401, whichever route and token, says how to authenticate (as the door's own answers do).
  if (out.body.statusCode === 401) http.setHeader(res, 'WWW-Authenticate', 'Bearer');
  if (out.retryAfterS !== undefined) http.setHeader(res, 'Retry-After', String(out.retryAfterS));
  http.reply(res, out.body, out.body.statusCode);
}

/** Errors of a connection the client reset or closed under the request (not the service's faults). */
const CLIENT_GONE = new Set([
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ERR_STREAM_PREMATURE_CLOSE',
  'ERR_STREAM_DESTROYED',
  'ERR_STREAM_WRITE_AFTER_END',
]);

/**
 * The client went away (reset or closed its connection) before its request was read or answered.
 * Judged by the error alone: a fault of the service stays one even when its client has left.
 */
export function isClientAbort(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | undefined;
  return (typeof e?.code === 'string' && CLIENT_GONE.has(e.code)) || (err instanceof Error && e?.message === 'aborted');
}

@Catch()
export class AllExceptionsFilter implements ExceptionFilter {
  private readonly logger = new Logger('Errors');

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    private readonly retryAfterS: number,
    private readonly options: {
      /** Counts a client's abort: the client's doing, not the service's fault. */
      clientAborted?: () => void;
      /** The methods of each path, to answer 405 where the router found the path but not the method. */
      routes?: RouteMethods;
    } = {},
  ) {}

  catch(err: unknown, host: ArgumentsHost): void {
    const http = this.adapterHost.httpAdapter;
    const res: unknown = host.switchToHttp().getResponse();
    const req = host.switchToHttp().getRequest<{ method?: string; url?: string } | undefined>();
    if (err instanceof NotFoundException && this.options.routes && req?.url) {
      const allow = this.options.routes.allowed(req.url);
      if (allow.length > 0) err = new MethodNotAllowedError(req.method ?? 'this method', allow);
    }
    if (!(err instanceof DomainError) && !(err instanceof HttpException) && isClientAbort(err)) {
      // Anyone can cause these at will: a count and a debug line, never an error with a stack.
      this.options.clientAborted?.();
      this.logger.debug(`client went away: ${String((err as Error)?.message ?? err)}`);
      return;
    }
    if (err instanceof UnavailableError) {
      this.logger.warn(`${err.dependency} unavailable: ${String((err.cause as Error)?.message ?? err.cause)}`);
    } else if (err instanceof OutcomeUnknownError) {
      this.logger.warn(`order outcome unknown: ${String((err.cause as Error)?.message ?? err.cause)}`);
    } else if (!(err instanceof DomainError) && !(err instanceof HttpException)) {
      this.logger.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
    }
    if (http.isHeadersSent(res)) return;
    sendError(http, res, err, this.retryAfterS);
  }
}
