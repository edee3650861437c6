// I5: bad input gets a clear 4xx with a stable code, never a 500 or a stack trace, and changes
// nothing: neither PostgreSQL (orders, products, segment stock) nor Redis (locks, hints). In-process
// (support/in-process.ts): bytes in, answer out, with Fastify's own parsing and routing on the way.
import Redis from 'ioredis';
import { auditProduct, resetState, withDb } from './support/database';
import { inProcessService } from './support/in-process';
import { admin, createProduct, Reply, testUrls, shop } from './support/service';

interface Case {
  name: string;
  method?: string;
  /** `:product` stands for the test product's id. */
  path: string;
  /** A string is sent as the raw body; a function gets the test product's id. */
  body?: unknown;
  headers?: Record<string, string>;
  status: number;
  code: string;
}

const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
const orderWith = (fields: Record<string, unknown>) => (productId: number) => ({
  userId: 'mallory',
  productId,
  ...fields,
});
const rawOrder = (tail: string) => (productId: number) => `{"userId":"mallory","productId":${productId}${tail}}`;
const product = (fields: Record<string, unknown>) => ({ name: 'bad', stock: 10, segments: 2, ...fields });

const malformedBodies: Case[] = [
  {
    name: 'a truncated JSON document',
    path: '/orders',
    body: '{"userId": "mallory", "productId": ',
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  { name: 'JSON with a trailing comma', path: '/orders', body: rawOrder(','), status: 400, code: 'VALIDATION_FAILED' },
  {
    name: 'single-quoted JSON',
    path: '/orders',
    body: "{'userId': 'mallory', 'productId': 1}",
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  { name: 'a bare JSON string', path: '/orders', body: '"mallory"', status: 400, code: 'VALIDATION_FAILED' },
  { name: 'a bare JSON null', path: '/orders', body: 'null', status: 400, code: 'VALIDATION_FAILED' },
  { name: 'a JSON array instead of an object', path: '/orders', body: '[]', status: 400, code: 'VALIDATION_FAILED' },
  {
    name: 'an array of valid orders',
    path: '/orders',
    body: (id: number) => [{ userId: 'mallory', productId: id }],
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  { name: 'an empty JSON body', path: '/orders', body: '', status: 400, code: 'VALIDATION_FAILED' },
  { name: 'no body at all', path: '/orders', status: 400, code: 'VALIDATION_FAILED' },
  {
    name: 'a valid order sent as text/plain',
    path: '/orders',
    body: (id: number) => JSON.stringify({ userId: 'mallory', productId: id }),
    headers: { 'content-type': 'text/plain' },
    status: 415,
    code: 'UNSUPPORTED_MEDIA_TYPE',
  },
  {
    name: 'an order sent form-encoded',
    path: '/orders',
    body: (id: number) => `userId=mallory&productId=${id}`,
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    status: 415,
    code: 'UNSUPPORTED_MEDIA_TYPE',
  },
  ...(['PATCH', 'POST'] as const).flatMap((method): Case[] => {
    const path = method === 'PATCH' ? '/admin/products/:product' : '/admin/products/:product/rebalance';
    const fields = method === 'PATCH' ? { name: 'renamed' } : { segments: 3 };
    const call = method === 'PATCH' ? 'a product change' : 'a rebalance';
    return [
      { name: `${call} with a null body`, method, path, body: 'null', status: 400, code: 'VALIDATION_FAILED' },
      { name: `${call} with an array body`, method, path, body: [fields], status: 400, code: 'VALIDATION_FAILED' },
      { name: `${call} with a number body`, method, path, body: '3', status: 400, code: 'VALIDATION_FAILED' },
      {
        name: `${call} sent as text/plain`,
        method,
        path,
        body: JSON.stringify(fields),
        headers: { 'content-type': 'text/plain' },
        status: 415,
        code: 'UNSUPPORTED_MEDIA_TYPE',
      },
      {
        name: `${call} sent form-encoded`,
        method,
        path,
        body: new URLSearchParams(Object.entries(fields).map(([k, v]) => [k, String(v)])).toString(),
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        status: 415,
        code: 'UNSUPPORTED_MEDIA_TYPE',
      },
    ];
  }),
  {
    name: 'a JSON body in an unsupported charset',
    path: '/orders',
    body: (id: number) => JSON.stringify({ userId: 'mallory', productId: id }),
    headers: { 'content-type': 'application/json; charset=latin1' },
    status: 415,
    code: 'UNSUPPORTED_MEDIA_TYPE',
  },
  {
    name: 'a JSON body in an unsupported content encoding',
    path: '/orders',
    body: (id: number) => JSON.stringify({ userId: 'mallory', productId: id }),
    headers: { 'content-encoding': 'compress-me-not' },
    status: 415,
    code: 'UNSUPPORTED_MEDIA_TYPE',
  },
  {
    name: 'a body that claims gzip but is plain JSON',
    path: '/orders',
    body: (id: number) => JSON.stringify({ userId: 'mallory', productId: id }),
    headers: { 'content-encoding': 'gzip' },
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a body over 16 kB',
    path: '/orders',
    body: orderWith({ pad: 'x'.repeat(17 * 1024) }),
    status: 413,
    code: 'PAYLOAD_TOO_LARGE',
  },
  {
    name: 'a product body over 16 kB',
    path: '/admin/products',
    body: product({ name: 'n'.repeat(17 * 1024) }),
    status: 413,
    code: 'PAYLOAD_TOO_LARGE',
  },
  {
    name: '5000 levels of nested arrays in an unknown field',
    path: '/orders',
    body: rawOrder(`,"x":${nested(5000)}`),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: '5000 levels of nested arrays as the userId',
    path: '/orders',
    body: (id: number) => `{"userId":${nested(5000)},"productId":${id}}`,
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: '2500 levels of nested objects in an unknown field',
    path: '/orders',
    body: rawOrder(`,"x":${'{"a":'.repeat(2500)}1${'}'.repeat(2500)}`),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: '5000 levels of nested arrays in a product',
    path: '/admin/products',
    body: `{"name":"bad","stock":1,"segments":1,"x":${nested(5000)}}`,
    status: 400,
    code: 'VALIDATION_FAILED',
  },
];

const wrongTypes: Case[] = [
  {
    name: 'productId as a numeric string',
    path: '/orders',
    body: { userId: 'mallory', productId: '1' },
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'productId true',
    path: '/orders',
    body: { userId: 'mallory', productId: true },
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'productId null',
    path: '/orders',
    body: { userId: 'mallory', productId: null },
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'productId as an array',
    path: '/orders',
    body: (id: number) => ({ userId: 'mallory', productId: [id] }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'productId as an object',
    path: '/orders',
    body: (id: number) => ({ userId: 'mallory', productId: { id } }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  { name: 'a missing productId', path: '/orders', body: { userId: 'mallory' }, status: 400, code: 'VALIDATION_FAILED' },
  {
    name: 'a missing userId',
    path: '/orders',
    body: (id: number) => ({ productId: id }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a fractional quantity',
    path: '/orders',
    body: orderWith({ quantity: 1.5 }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'quantity as a numeric string',
    path: '/orders',
    body: orderWith({ quantity: '2' }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  { name: 'userId true', path: '/orders', body: orderWith({ userId: true }), status: 400, code: 'VALIDATION_FAILED' },
  { name: 'userId null', path: '/orders', body: orderWith({ userId: null }), status: 400, code: 'VALIDATION_FAILED' },
  {
    name: 'quantity null',
    path: '/orders',
    body: orderWith({ quantity: null }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'userId as an object',
    path: '/orders',
    body: orderWith({ userId: { id: 'mallory' } }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'userId as an array',
    path: '/orders',
    body: orderWith({ userId: ['mallory'] }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a product stock as a string',
    path: '/admin/products',
    body: product({ stock: '10' }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a product name as a number',
    path: '/admin/products',
    body: product({ name: 7 }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a product without a name',
    path: '/admin/products',
    body: { stock: 10, segments: 2 },
    status: 400,
    code: 'VALIDATION_FAILED',
  },
];

const outOfRange: Case[] = [
  {
    name: 'productId 0',
    path: '/orders',
    body: { userId: 'mallory', productId: 0 },
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'productId -1',
    path: '/orders',
    body: { userId: 'mallory', productId: -1 },
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'productId 2147483648',
    path: '/orders',
    body: { userId: 'mallory', productId: 2147483648 },
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'productId 1e400 (Infinity once parsed)',
    path: '/orders',
    body: '{"userId":"mallory","productId":1e400}',
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'productId -1e400',
    path: '/orders',
    body: '{"userId":"mallory","productId":-1e400}',
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  { name: 'quantity 0', path: '/orders', body: orderWith({ quantity: 0 }), status: 400, code: 'VALIDATION_FAILED' },
  { name: 'quantity -1', path: '/orders', body: orderWith({ quantity: -1 }), status: 400, code: 'VALIDATION_FAILED' },
  {
    name: 'quantity 2147483648',
    path: '/orders',
    body: orderWith({ quantity: 2147483648 }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: "quantity over the product's limit",
    path: '/orders',
    body: orderWith({ quantity: 3 }),
    status: 400,
    code: 'QUANTITY_OVER_LIMIT',
  },
  { name: 'userId 0', path: '/orders', body: orderWith({ userId: 0 }), status: 400, code: 'VALIDATION_FAILED' },
  { name: 'userId -7', path: '/orders', body: orderWith({ userId: -7 }), status: 400, code: 'VALIDATION_FAILED' },
  { name: 'userId 1.5', path: '/orders', body: orderWith({ userId: 1.5 }), status: 400, code: 'VALIDATION_FAILED' },
  {
    name: 'userId 1e20 (beyond a safe integer)',
    path: '/orders',
    body: orderWith({ userId: 1e20 }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'an unknown product',
    path: '/orders',
    body: { userId: 'mallory', productId: 2147483647 },
    status: 404,
    code: 'PRODUCT_NOT_FOUND',
  },
  {
    name: 'a product stock of 1000000001',
    path: '/admin/products',
    body: product({ stock: 1_000_000_001 }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a product stock of -1',
    path: '/admin/products',
    body: product({ stock: -1 }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a product stock of 1e400',
    path: '/admin/products',
    body: '{"name":"bad","stock":1e400,"segments":2}',
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a product with 0 segments',
    path: '/admin/products',
    body: product({ segments: 0 }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a product with 1025 segments',
    path: '/admin/products',
    body: product({ segments: 1025 }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a product limit per user of 0',
    path: '/admin/products',
    body: product({ limitPerUser: 0 }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a product limit per user of 1001',
    path: '/admin/products',
    body: product({ limitPerUser: 1001 }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'an empty product name',
    path: '/admin/products',
    body: product({ name: '' }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a product name with a NUL character',
    path: '/admin/products',
    body: product({ name: 'nul\u0000name' }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a product name of 201 characters',
    path: '/admin/products',
    body: product({ name: 'n'.repeat(201) }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
];

const badUserIds: Case[] = [
  ['an empty userId', ''],
  ['a userId with a space', 'mal lory'],
  ["a userId with 'ü'", 'müller'],
  ['a userId with an emoji', 'mallory😀'],
  ['a userId with a newline', 'mallory\n'],
  ['a userId with a NUL character', 'mal\u0000lory'],
  ['a userId with a Redis glob', 'mallory*'],
  ['a userId with a slash', '../mallory'],
  ['a userId of 65 characters', 'a'.repeat(65)],
].map(([name, userId]) => ({
  name,
  path: '/orders',
  body: orderWith({ userId }),
  status: 400,
  code: 'VALIDATION_FAILED',
}));

const unknownFields: Case[] = [
  {
    name: 'an unknown field in an order',
    path: '/orders',
    body: orderWith({ price: 0 }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'an unknown field in a product',
    path: '/admin/products',
    body: product({ id: 1 }),
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'an unknown field in a rebalance',
    path: '/admin/products/:product/rebalance',
    body: { segments: 2, dryRun: true },
    status: 400,
    code: 'VALIDATION_FAILED',
  },
];

// A malformed id is a bad request; a well-formed one that names nothing is 404 (see api.e2e-spec).
const badPaths: Case[] = [
  ['a non-numeric order id', 'GET', '/orders/abc'],
  ['a fractional order id', 'GET', '/orders/1.5'],
  ['an order id with a leading zero', 'GET', '/orders/01'],
  ['an order id beyond bigint', 'GET', '/orders/99999999999999999999'],
  ['an order id with SQL in it', 'GET', `/orders/${encodeURIComponent("1' OR '1'='1")}`],
  ['an order id with an encoded NUL', 'GET', '/orders/%00'],
  ['a non-numeric order id to pay', 'POST', '/orders/abc/pay'],
  ['a non-numeric order id to cancel', 'POST', '/orders/abc/cancel'],
  ['a non-numeric product id', 'GET', '/admin/products/abc'],
  ['a negative product id', 'GET', '/admin/products/-1'],
  ['a product id beyond int4', 'GET', '/admin/products/99999999999'],
  ['a product id in exponent notation', 'GET', '/admin/products/1e3'],
  ['an order id in exponent notation', 'GET', '/orders/1e3'],
  ['a non-numeric product id to rebalance', 'POST', '/admin/products/abc/rebalance'],
].map(([name, method, path]) => ({
  name,
  method,
  path,
  body: method === 'POST' ? { userId: 'mallory' } : undefined,
  headers: path.startsWith('/orders') ? shop : admin,
  status: 400,
  code: 'VALIDATION_FAILED',
}));

const malformedPaths: Case[] = [
  {
    name: 'a malformed percent-encoding in an order id',
    method: 'GET',
    path: '/orders/%E0%A4%A',
    status: 400,
    code: 'VALIDATION_FAILED',
  },
  {
    name: 'a malformed percent-encoding in a product id',
    method: 'GET',
    path: '/admin/products/%zz',
    headers: admin,
    status: 400,
    code: 'VALIDATION_FAILED',
  },
];

describe('bad input', () => {
  let redis: Redis;
  let productId: number;

  /**
   * Everything a request could change: the rows of products and segments, the order count and the
   * events, every Redis key but the operator page's per-second records (written every second, and
   * counting refusals is their job).
   */
  async function snapshot() {
    const db = await withDb(async (c) => ({
      products: (await c.query('SELECT * FROM products ORDER BY id')).rows,
      segments: (await c.query('SELECT * FROM stock_segments ORDER BY product_id, idx')).rows,
      orders: (await c.query('SELECT count(*)::int AS n FROM orders')).rows[0].n as number,
      events: (await c.query('SELECT count(*)::int AS n FROM order_events')).rows[0].n as number,
    }));
    const keys = (await redis.keys('*')).filter((k) => !k.startsWith('{flashsale:live}:')).sort();
    return { ...db, keys };
  }

  function send(c: Case): Promise<Reply> {
    const body = typeof c.body === 'function' ? (c.body as (id: number) => unknown)(productId) : c.body;
    const headers = c.path.startsWith('/admin') ? { ...admin, ...c.headers } : { ...c.headers };
    return request(c.method ?? 'POST', c.path.replace(':product', String(productId)), body, headers);
  }

  function expectCleanError(res: Reply, status: number, code: string): void {
    expect({ status: res.status, code: res.body?.code }).toEqual({ status, code });
    expect(res.body).toEqual({ statusCode: status, code, message: expect.any(String) });
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(res.text).not.toMatch(/\n\s*at |\bat .+\.js:\d+|Error:|node_modules|dist\/src/);
  }

  beforeAll(async () => {
    await resetState();
    redis = new Redis(testUrls().redisUrl);
  });
  afterAll(() => redis?.disconnect());
  const { request } = inProcessService();
  beforeAll(async () => {
    productId = (await createProduct(request, { stock: 10, segments: 2, limitPerUser: 2 })).id;
    // A sale in progress: one order, so the snapshot covers a product with history.
    const first = await request('POST', '/orders', { userId: 'honest', productId });
    if (first.status !== 201) throw new Error(`setup order: ${first.status} ${first.text}`);
  });

  describe.each([
    ['malformed bodies', malformedBodies],
    ['wrong types', wrongTypes],
    ['out-of-range numbers and unknown ids', outOfRange],
    ['userIds outside [A-Za-z0-9_.:-]{1,64}', badUserIds],
    ['unknown fields', unknownFields],
    ['bad ids in paths', badPaths],
    ['malformed paths', malformedPaths],
  ])('%s', (_group, cases) => {
    it.each(cases)('should refuse $name with $status $code and change nothing', async (c) => {
      const before = await snapshot();
      const res = await send(c);
      expectCleanError(res, c.status, c.code);
      expect(await snapshot()).toEqual(before);
    });
  });

  // Nest's ValidationPipe deletes these keys (stripProtoKeys) before validating, so
  // forbidNonWhitelisted never sees them: they are ignored rather than refused. What must hold
  // either way: nothing they carry reaches the order, and the service does not fail.
  it.each([
    ['__proto__', '{"quantity":2,"userId":"smuggled"}'],
    ['constructor', '{"prototype":{"quantity":2}}'],
    ['prototype', '{"quantity":2}'],
  ])('should not let a %s field smuggle values into an order', async (key, value) => {
    const p = await createProduct(request, { stock: 4, segments: 1, limitPerUser: 2 });
    const userId = `proto-${key.replace(/_/g, '')}`;
    const res = await request('POST', '/orders', `{"userId":"${userId}","productId":${p.id},"${key}":${value}}`);
    if (res.status === 201) {
      expect(res.body).toMatchObject({ userId, productId: p.id, quantity: 1 });
      expect(await auditProduct(p.id)).toMatchObject({ remaining: 3, ordered: 1, orders: 1 });
    } else {
      expectCleanError(res, 400, 'VALIDATION_FAILED');
      expect(await auditProduct(p.id)).toMatchObject({ remaining: 4, ordered: 0, orders: 0 });
    }
    const plain = await request('POST', '/orders', { userId: `${userId}-next`, productId: p.id });
    expect(plain.status).toBe(201);
    expect(plain.body.quantity).toBe(1);
  });

  it('should say where a body stops being JSON: what, line, column and position', async () => {
    const res = await request('POST', '/orders', '{"userId": "mallory",\n "productId": 1,}');
    expectCleanError(res, 400, 'VALIDATION_FAILED');
    expect(res.body.message).toBe(
      'request body is not valid JSON: Expected double-quoted property name at line 2, column 17 (position 38)',
    );
  });

  it('should say once that a string where a number goes must be a number, not the ranges it misses', async () => {
    const created = await request('POST', '/admin/products', { name: 'typed', stock: 'ten', segments: 2 }, admin);
    expectCleanError(created, 400, 'VALIDATION_FAILED');
    expect(created.body.message).toBe('stock must be a number');
    const restock = await request('POST', `/admin/products/${productId}/restock`, { units: '5' }, admin);
    expect(restock.body.message).toBe('units must be a number');
    const order = await request('POST', '/orders', { userId: 'typed', productId: String(productId) });
    expect(order.body.message).toBe('productId must be a number');
  });

  it('should say that a missing field is required, once, instead of listing the rules it fails', async () => {
    const res = await request('POST', '/orders', { userId: 'mallory' });
    expectCleanError(res, 400, 'VALIDATION_FAILED');
    expect(res.body.message).toBe('productId is required');
  });

  it.each([
    ['PUT', '/orders', 'POST'],
    ['DELETE', '/orders/1', 'GET, HEAD'],
    ['GET', '/orders/1/pay', 'POST'],
    ['DELETE', '/admin/products/:product', 'GET, HEAD, PATCH'],
  ])('should answer %s %s with 405 METHOD_NOT_ALLOWED and Allow: %s, changing nothing', async (method, path, allow) => {
    const before = await snapshot();
    const res = await request(method, path.replace(':product', String(productId)), undefined, { ...shop, ...admin });
    expectCleanError(res, 405, 'METHOD_NOT_ALLOWED');
    expect(res.headers.allow).toBe(allow);
    expect(await snapshot()).toEqual(before);
  });

  it('should still answer 404 for a path that no method has', async () => {
    expectCleanError(await request('GET', '/no/such/path'), 404, 'NOT_FOUND');
  });

  it('should accept a userId of exactly 64 allowed characters, the boundary of the refused 65', async () => {
    const userId = 'Az09_.:-'.repeat(8);
    const res = await request('POST', '/orders', { userId, productId });
    expect(res.status).toBe(201);
    expect(res.body.userId).toBe(userId);
  });

  it('should still serve after every bad request above', async () => {
    const res = await request('POST', '/orders', { userId: 'after-the-storm', productId });
    expect(res.status).toBe(201);
    expect((await request('GET', '/health')).status).toBe(200);
  });
});
