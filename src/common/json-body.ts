// JSON request bodies on Fastify: `application/json` only (another media type is 415), at most
// 16 kB (once inflated too), at most 32 levels deep, UTF-8, an object (every body of this API is
// one), parsed by Fastify's own JSON parser, which refuses `__proto__` and `constructor.prototype`
// keys (secure-json-parse). A body that is not JSON is answered with where it stops being JSON
// (line, column, position). A refused body reaches the error handler, which Nest routes through
// AllExceptionsFilter, so it is answered like every other error.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { parse as parseLeniently, ParseError } from 'jsonc-parser';
import { brotliDecompressSync, gunzipSync, inflateSync, InputType, ZlibOptions } from 'node:zlib';
import { DomainError } from './domain-errors';

export const BODY_LIMIT_BYTES = 16 * 1024;
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

export class BadBodyError extends DomainError {
  constructor(
    readonly code: 'VALIDATION_FAILED' | 'PAYLOAD_TOO_LARGE' | 'UNSUPPORTED_MEDIA_TYPE',
    message: string,
  ) {
    super(message);
  }
}

const tooLarge = () =>
  new BadBodyError('PAYLOAD_TOO_LARGE', `request body is larger than ${BODY_LIMIT_BYTES / 1024} kB`);

const INFLATE: Record<string, (buf: InputType, options: ZlibOptions) => Buffer> = {
  gzip: gunzipSync,
  'x-gzip': gunzipSync,
  deflate: inflateSync,
  br: brotliDecompressSync,
};

/** The body as UTF-8 JSON text: inflated when compressed, refused when in another charset. */
export function decodeBody(headers: FastifyRequest['headers'], raw: Buffer): Buffer {
  const charset = /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(headers['content-type'] ?? '')?.[1]?.toLowerCase();
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
    throw new BadBodyError('UNSUPPORTED_MEDIA_TYPE', 'request body must be UTF-8');
  }
  const encoding = (headers['content-encoding'] ?? 'identity').trim().toLowerCase();
  if (encoding === 'identity') return raw;
  const inflate = INFLATE[encoding];
  if (!inflate)
    throw new BadBodyError(
      'UNSUPPORTED_MEDIA_TYPE',
      'request body encoding is not supported (gzip, deflate, br or none)',
    );
  try {
    // The limit holds for the inflated text too: a few compressed bytes can expand to gigabytes.
    return inflate(raw, { maxOutputLength: BODY_LIMIT_BYTES });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') throw tooLarge();
    throw new BadBodyError('VALIDATION_FAILED', `request body is not valid ${encoding}`);
  }
}

/** Line and column (from 1) of a position (from 0) in a text. */
function lineAndColumn(text: string, position: number): { line: number; column: number } {
  const before = text.slice(0, position);
  const lineStart = before.lastIndexOf('\n') + 1;
  return { line: before.split('\n').length, column: position - lineStart + 1 };
}

/** A token for a message: short, and with any character that would not show written as an escape. */
const shown = (token: string) => JSON.stringify(token.length > 20 ? `${token.slice(0, 20)}…` : token);

/**
 * What is wrong with a text that is not JSON, and where. V8's JSON.parse says where for most
 * mistakes (a missing comma or quote, a trailing comma, a control character); for a word that is
 * not a value (`tru`, `abc`) it names a character without its place, which
 * jsonc-parser's scanner finds. Null when the text is JSON.
 */
export function jsonSyntaxError(text: string): { reason: string; position: number | null } | null {
  try {
    JSON.parse(text);
    return null;
  } catch (err) {
    const message = (err as Error).message;
    const at = / (?:in JSON )?at position (\d+)/.exec(message);
    if (at) return { reason: message.slice(0, at.index), position: Number(at[1]) };
    if (message.startsWith('Unexpected end of JSON input'))
      return { reason: 'The text ends before the JSON does', position: text.length };
    const errors: ParseError[] = [];
    parseLeniently(text, errors, { disallowComments: true, allowTrailingComma: false, allowEmptyContent: false });
    const first = errors[0];
    // (Were the two parsers ever to disagree, V8's words without a place rather than a wrong place.)
    if (first === undefined) return { reason: message.split(',')[0], position: null };
    return {
      reason: `Unexpected ${shown(text.slice(first.offset, first.offset + first.length))}`,
      position: first.offset,
    };
  }
}

/** The refusal of a body that is not JSON, saying where: "… at line 2, column 5 (position 17)". */
export function notJsonText(text: string): BadBodyError {
  const wrong = jsonSyntaxError(text);
  // Fastify's parser also refuses valid JSON with a `__proto__` or `constructor.prototype` key.
  if (wrong === null)
    return new BadBodyError('VALIDATION_FAILED', 'request body must not have __proto__ or constructor.prototype keys');
  let where = '';
  if (wrong.position !== null) {
    const { line, column } = lineAndColumn(text, wrong.position);
    where = ` at line ${line}, column ${column} (position ${wrong.position})`;
  }
  return new BadBodyError('VALIDATION_FAILED', `request body is not valid JSON: ${wrong.reason}${where}`);
}

/** A JSON body whose top level is not an object (null, an array, a string, a number). */
export const notAnObject = () => new BadBodyError('VALIDATION_FAILED', 'request body must be a JSON object');

/** A body sent under another media type than JSON (text/plain, a form, none named). */
export const notJson = () => new BadBodyError('UNSUPPORTED_MEDIA_TYPE', 'request body must be application/json');

/** Replaces Fastify's body parsers: JSON objects only; any other media type is refused unread (415). */
export function registerJsonBody(fastify: FastifyInstance): void {
  const parseJson = fastify.getDefaultJsonParser('error', 'error');
  fastify.removeAllContentTypeParsers();
  fastify.addContentTypeParser(
    'application/json',
    { parseAs: 'buffer', bodyLimit: BODY_LIMIT_BYTES },
    (req, raw, done) => {
      let text: Buffer;
      try {
        text = decodeBody(req.headers, raw as Buffer);
        // Validation recurses per level; a deep body would overflow the stack there, so refuse it here.
        if (jsonDepth(text) > MAX_DEPTH)
          throw new BadBodyError('VALIDATION_FAILED', `request body nests deeper than ${MAX_DEPTH} levels`);
      } catch (err) {
        return done(err as Error, undefined);
      }
      // Typed for a string, but secure-json-parse takes the buffer as it is. It answers through
      // `done` (synchronously); its typed return value carries nothing. Nest's validation would
      // take a null body for an empty object, so the top level is checked here.
      void parseJson(req, text as unknown as string, (err, body: unknown) => {
        if ((err as { code?: string } | null)?.code === 'FST_ERR_CTP_INVALID_JSON_BODY')
          return done(notJsonText(text.toString('utf8')), undefined);
        if (err) return done(err, undefined);
        if (typeof body !== 'object' || body === null || Array.isArray(body)) return done(notAnObject(), undefined);
        done(null, body);
      });
    },
  );
  // Refused before a byte of it is read: the connection's rest is drained after the answer
  // (connections.ts), so the client still reads the 415.
  fastify.addContentTypeParser('*', (_req, _payload, done) => done(notJson(), undefined));
}
