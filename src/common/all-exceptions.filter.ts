// The one place where failures become HTTP answers: { statusCode, code, message }, a Retry-After
// on 503s, and never a stack trace or an internal detail in the body.
import { ArgumentsHost, Catch, ExceptionFilter, HttpException, Logger } from '@nestjs/common';
import type { Response } from 'express';
import { AlreadyOrderedError, DomainError, ERROR_STATUS, ErrorCode, OutcomeUnknownError, UnavailableError } from './domain-errors';

export interface ErrorBody {
  statusCode: number;
  code: ErrorCode;
  message: string;
  /** With ALREADY_ORDERED, when known: the order the user holds. */
  orderId?: number;
}

const HTTP_CODES: Record<number, ErrorCode> = {
  400: 'VALIDATION_FAILED',
  401: 'UNAUTHORIZED',
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
    return { body, retryAfterS };
  }
  if (err instanceof HttpException) {
    const statusCode = err.getStatus();
    const code = HTTP_CODES[statusCode] ?? (statusCode === 503 ? 'UNAVAILABLE' : statusCode >= 500 ? 'INTERNAL' : 'VALIDATION_FAILED');
    const message = statusCode === 404 ? 'no such route' : statusCode >= 500 ? 'internal error' : err.message;
    return { body: { statusCode, code, message }, retryAfterS: statusCode === 503 ? defaultRetryAfterS : undefined };
  }
  return { body: { statusCode: 500, code: 'INTERNAL', message: 'internal error' } };
}

export function sendError(res: Response, err: unknown, retryAfterS?: number): void {
  const out = toErrorResponse(err, retryAfterS);
  if (out.retryAfterS !== undefined) res.setHeader('Retry-After', String(out.retryAfterS));
  res.status(out.body.statusCode).json(out.body);
}

@Catch()
export class AllExceptionsFilter implements ExceptionFilter {
  private readonly logger = new Logger('Errors');

  constructor(private readonly retryAfterS: number) {}

  catch(err: unknown, host: ArgumentsHost): void {
    const res = host.switchToHttp().getResponse<Response>();
    if (err instanceof UnavailableError) {
      this.logger.warn(`${err.dependency} unavailable: ${String((err.cause as Error)?.message ?? err.cause)}`);
    } else if (err instanceof OutcomeUnknownError) {
      this.logger.warn(`order outcome unknown: ${String((err.cause as Error)?.message ?? err.cause)}`);
    } else if (!(err instanceof DomainError) && !(err instanceof HttpException)) {
      this.logger.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
    }
    if (res.headersSent) return;
    sendError(res, err, this.retryAfterS);
  }
}
