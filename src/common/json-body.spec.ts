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
