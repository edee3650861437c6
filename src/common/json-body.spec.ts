// What the body parser lets through to JSON.parse: UTF-8 text of at most 16 kB, inflated when
// compressed, and nothing nested deeper than MAX_DEPTH.
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { BadBodyError, BODY_LIMIT_BYTES, decodeBody, jsonDepth, MAX_DEPTH } from './json-body';

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
