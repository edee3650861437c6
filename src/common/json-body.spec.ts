// What the body parser lets through to JSON.parse: UTF-8 text of at most 16 kB, inflated when
// compressed, and nothing nested deeper than MAX_DEPTH; and what it hands on: JSON objects only.
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import Fastify from 'fastify';
import { BadBodyError, BODY_LIMIT_BYTES, decodeBody, jsonDepth, MAX_DEPTH, registerJsonBody } from './json-body';

const json = Buffer.from('{"userId":"alice","productId":1}');

function refusal(fn: () => unknown): { code: string } | undefined {
  try {
    fn();
  } catch (err) {
    if (err instanceof BadBodyError) return { code: err.code };
    throw err;
  }
  return undefined;
}

describe('decodeBody', () => {
  it.each([
    ['no charset', 'application/json'],
    ['charset=utf-8', 'application/json; charset=utf-8'],
    ['charset="UTF-8" quoted and in capitals', 'application/json; charset="UTF-8"'],
    ['charset=utf8', 'application/json;charset=utf8'],
  ])('should pass a plain body with %s through unchanged', (_name, type) => {
    expect(decodeBody({ 'content-type': type }, json)).toBe(json);
  });

  it.each(['latin1', 'iso-8859-1', 'utf-16le'])('should refuse charset=%s with UNSUPPORTED_MEDIA_TYPE', (charset) => {
    expect(refusal(() => decodeBody({ 'content-type': `application/json; charset=${charset}` }, json))).toEqual({
      code: 'UNSUPPORTED_MEDIA_TYPE',
    });
  });

  it.each([
    ['gzip', gzipSync],
    ['deflate', deflateSync],
    ['br', brotliCompressSync],
  ])('should inflate a %s body', (encoding, compress) => {
    expect(decodeBody({ 'content-encoding': encoding }, compress(json)).toString()).toBe(json.toString());
  });

  it('should refuse an unknown content encoding with UNSUPPORTED_MEDIA_TYPE', () => {
    expect(refusal(() => decodeBody({ 'content-encoding': 'compress' }, json))).toEqual({
      code: 'UNSUPPORTED_MEDIA_TYPE',
    });
  });

  it('should refuse a body that claims gzip but is not with VALIDATION_FAILED', () => {
    expect(refusal(() => decodeBody({ 'content-encoding': 'gzip' }, json))).toEqual({ code: 'VALIDATION_FAILED' });
  });

  it('should refuse a small gzip body that inflates past the limit with PAYLOAD_TOO_LARGE', () => {
    const bomb = gzipSync(Buffer.alloc(10 * 1024 * 1024, 0x20));
    expect(bomb.length).toBeLessThan(BODY_LIMIT_BYTES);
    expect(refusal(() => decodeBody({ 'content-encoding': 'gzip' }, bomb))).toEqual({ code: 'PAYLOAD_TOO_LARGE' });
  });

  it('should inflate a gzip body of exactly the limit', () => {
    const full = Buffer.alloc(BODY_LIMIT_BYTES, 0x20);
    expect(decodeBody({ 'content-encoding': 'gzip' }, gzipSync(full)).length).toBe(BODY_LIMIT_BYTES);
  });
});

describe('jsonDepth', () => {
  it.each([
    ['a flat object', '{"a":1}', 1],
    ['an array in an object', '{"a":[1,2]}', 2],
    ['brackets inside strings', '{"a":"[[[{{{"}', 1],
    ['an escaped quote inside a string', '{"a":"\\"[[["}', 1],
    [`${MAX_DEPTH + 1} nested arrays`, `${'['.repeat(MAX_DEPTH + 1)}${']'.repeat(MAX_DEPTH + 1)}`, MAX_DEPTH + 1],
  ])('should count %s', (_name, text, depth) => {
    expect(jsonDepth(Buffer.from(text))).toBe(depth);
  });
});

describe('registerJsonBody', () => {
  /** What a POST of `payload` as `type` gives the route, or the error the parser refused it with. */
  const post = async (payload: string, type: string): Promise<{ got?: unknown; refused?: unknown }> => {
    const fastify = Fastify();
    registerJsonBody(fastify);
    let refused: unknown;
    fastify.setErrorHandler((err, _req, reply) => {
      refused = err;
      void reply.code(400).send({});
    });
    fastify.post('/', (req) => ({ got: req.body }));
    const res = await fastify.inject({ method: 'POST', url: '/', payload, headers: { 'content-type': type } });
    await fastify.close();
    return refused === undefined ? res.json<{ got: unknown }>() : { refused };
  };

  it('should pass a JSON object through', async () => {
    expect(await post('{"a":1}', 'application/json')).toEqual({ got: { a: 1 } });
  });

  it.each(['null', '[]', '[{"a":1}]', '"text"', '3', 'true'])(
    'should refuse a JSON body that is not an object (%s) with VALIDATION_FAILED',
    async (payload) => {
      expect((await post(payload, 'application/json')).refused).toMatchObject({
        code: 'VALIDATION_FAILED',
        message: 'request body must be a JSON object',
      });
    },
  );

  it.each([
    ['a trailing comma', '{"a":1,}', 'Expected double-quoted property name at line 1, column 8 (position 7)'],
    [
      'a missing comma, lines later',
      '{\n  "a": 1\n  "b": 2\n}',
      "Expected ',' or '}' after property value at line 3, column 3 (position 13)",
    ],
    ['single quotes', "{'a':1}", "Expected property name or '}' at line 1, column 2 (position 1)"],
    ['a misspelt literal', '{"a":tru}', 'Unexpected "tru" at line 1, column 6 (position 5)'],
    ['a bare word, on line 2', '{"a":1,\n"b":abc}', 'Unexpected "abc" at line 2, column 5 (position 12)'],
    ['a cut-off text', '{"a":', 'The text ends before the JSON does at line 1, column 6 (position 5)'],
    [
      'text after the object',
      '{"a":1} x',
      'Unexpected non-whitespace character after JSON at line 1, column 9 (position 8)',
    ],
  ])('should say where a body with %s stops being JSON', async (_name, payload, where) => {
    expect((await post(payload, 'application/json')).refused).toMatchObject({
      code: 'VALIDATION_FAILED',
      message: `request body is not valid JSON: ${where}`,
    });
  });

  it('should refuse a __proto__ key with VALIDATION_FAILED, saying so', async () => {
    expect((await post('{"userId":"a","__proto__":{"x":1}}', 'application/json')).refused).toMatchObject({
      code: 'VALIDATION_FAILED',
      message: 'request body must not have __proto__ or constructor.prototype keys',
    });
  });

  it.each(['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/xml'])(
    'should refuse a body sent as %s with UNSUPPORTED_MEDIA_TYPE',
    async (type) => {
      const { refused } = await post('{"a":1}', type);
      expect(refused).toBeInstanceOf(BadBodyError);
      expect(refused).toMatchObject({
        code: 'UNSUPPORTED_MEDIA_TYPE',
        message: 'request body must be application/json',
      });
    },
  );
});
