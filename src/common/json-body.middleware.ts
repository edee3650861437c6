// JSON body parsing with a size limit, answering malformed or oversize bodies in the service's own
// error format (Nest's built-in parser is turned off in main.ts).
import express, { RequestHandler } from 'express';
import { DomainError } from './domain-errors';
import { sendError } from './all-exceptions.filter';

export const BODY_LIMIT = '16kb';
/** No request of this API nests deeper than 2; 32 leaves room and stops recursion-bombs early. */
export const MAX_DEPTH = 32;

/** Nesting depth of a JSON text, counted over brackets outside strings, without parsing it. */
export function jsonDepth(buf: Buffer): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < buf.length; i++) {
    const c = buf[i];
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped byte
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) max = Math.max(max, ++depth);
    else if (c === 0x7d || c === 0x5d) depth--;
  }
  return max;
}

class TooDeepError extends Error {}

class BadBodyError extends DomainError {
  constructor(
    readonly code: 'VALIDATION_FAILED' | 'PAYLOAD_TOO_LARGE' | 'UNSUPPORTED_MEDIA_TYPE',
    message: string,
  ) {
    super(message);
  }
}

export function jsonBody(): RequestHandler {
  const parse = express.json({
    limit: BODY_LIMIT,
    strict: true,
    // Validation recurses per level; a deep body would overflow the stack there, so refuse it here.
    verify: (_req, _res, buf) => {
      if (jsonDepth(buf) > MAX_DEPTH) throw new TooDeepError();
    },
  });
  return (req, res, next) => {
    parse(req, res, (err?: unknown) => {
      if (!err) return next();
      const type = (err as { type?: string }).type;
      if (type === 'entity.verify.failed') {
        return sendError(res, new BadBodyError('VALIDATION_FAILED', `request body nests deeper than ${MAX_DEPTH} levels`));
      }
      if (type === 'entity.too.large') return sendError(res, new BadBodyError('PAYLOAD_TOO_LARGE', `request body is larger than ${BODY_LIMIT}`));
      if (type === 'encoding.unsupported' || type === 'charset.unsupported') {
        return sendError(res, new BadBodyError('UNSUPPORTED_MEDIA_TYPE', 'request body encoding is not supported'));
      }
      return sendError(res, new BadBodyError('VALIDATION_FAILED', 'request body is not valid JSON'));
    });
  };
}
