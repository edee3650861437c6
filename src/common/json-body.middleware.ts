// JSON body parsing with a size limit, answering malformed or oversize bodies in the service's own
// error format (Nest's built-in parser is turned off in main.ts).
import express, { RequestHandler } from 'express';
import { DomainError } from './domain-errors';
import { sendError } from './all-exceptions.filter';

export const BODY_LIMIT = '16kb';

class BadBodyError extends DomainError {
  constructor(
    readonly code: 'VALIDATION_FAILED' | 'PAYLOAD_TOO_LARGE' | 'UNSUPPORTED_MEDIA_TYPE',
    message: string,
  ) {
    super(message);
  }
}

export function jsonBody(): RequestHandler {
  const parse = express.json({ limit: BODY_LIMIT, strict: true });
  return (req, res, next) => {
    parse(req, res, (err?: unknown) => {
      if (!err) return next();
      const type = (err as { type?: string }).type;
      if (type === 'entity.too.large') return sendError(res, new BadBodyError('PAYLOAD_TOO_LARGE', `request body is larger than ${BODY_LIMIT}`));
      if (type === 'encoding.unsupported' || type === 'charset.unsupported') {
        return sendError(res, new BadBodyError('UNSUPPORTED_MEDIA_TYPE', 'request body encoding is not supported'));
      }
      return sendError(res, new BadBodyError('VALIDATION_FAILED', 'request body is not valid JSON'));
    });
  };
}
