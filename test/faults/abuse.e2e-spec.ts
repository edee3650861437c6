// Abuse, not mistakes (test/bad-input.e2e-spec.ts has the plain bad-input table): one user firing
// hundreds of orders at once, guessed admin tokens, absurd numbers, control and unicode
// characters in ids, deeply nested JSON. Each must get a clear 4xx that changes nothing, and no
// reply body may show anything of the inside (stack, error class, file path, SQL).
import { join } from 'node:path';
import { admin, ADMIN_TOKEN, createProduct, pooled, Reply, request, ServiceProcess, shop } from '../support/service';
import {
  brief,
  expectPromisesKept,
  FaultPostgres,
  FaultRedis,
  leaksInternals,
  placeOrder,
  scratchDir,
  startFaultService,
  stopAll,
  withPg,
} from './support';

describe('abuse of the public and admin API', () => {
  const scratch = scratchDir('abuse');
  let pg: FaultPostgres;
  let redis: FaultRedis;
  let svc: ServiceProcess;
  let productId: number;
  /** Every reply body of this spec, to check at the end that none shows internals. */
  const bodies: string[] = [];
  const send = async (
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ): Promise<Reply> => {
    const r = await request(svc.url, method, path, body, headers);
    bodies.push(r.text);
    return r;
  };
  const order = async (userId: string, quantity?: number) => {
    const o = await placeOrder(svc.url, userId, productId, quantity);
    bodies.push(o.text);
    return o;
  };
  const counts = () =>
    withPg(
      pg.url,
      async (db) =>
        (
          await db.query(
            'SELECT (SELECT count(*) FROM products)::int AS products, (SELECT count(*) FROM orders)::int AS orders, (SELECT COALESCE(sum(stock), 0) FROM stock_segments)::int AS stock',
          )
        ).rows[0],
    );

  beforeAll(async () => {
    [pg, redis] = await Promise.all([FaultPostgres.start(join(scratch.dir, 'pg')), FaultRedis.start()]);
    svc = await startFaultService(pg, redis, { LOG_LEVEL: 'error' });
    productId = (await createProduct(svc.url, { stock: 1000, segments: 10, limitPerUser: 3 })).id;
  });
  afterAll(async () => {
    await stopAll(
      () => svc?.stop(),
      () => redis?.stop(),
      () => pg?.stop(),
    );
    scratch.cleanup();
  });

  it('should give one user exactly one order out of 300 concurrent requests', async () => {
    const outcomes = await pooled(
      Array.from({ length: 300 }, (_, i) => () => order('greedy', (i % 3) + 1)),
      300,
    );
    const created = outcomes.filter((o) => o.status === 201);
    expect(created).toHaveLength(1);
    const others = outcomes.filter((o) => o.status !== 201);
    expect(
      others
        .filter((o) => !(o.status === 409 && ['ORDER_IN_PROGRESS', 'ALREADY_ORDERED'].includes(o.code as string)))
        .map(brief),
    ).toEqual([]);
    const books = await expectPromisesKept(pg.url, productId, outcomes, { failedMeansNoOrder: true });
    expect([...books.users]).toEqual(['greedy']);
    expect(books.ordered).toBe(JSON.parse(created[0].text).quantity);
  });

  it('should answer every guessed admin token 401 with one and the same body, creating nothing', async () => {
    const before = await counts();
    // (Not guesses: "bearer <token>", the scheme being case-insensitive, and "<token> " whose
    // trailing space HTTP itself strips.)
    const guesses = [
      '',
      'Bearer',
      'Bearer ',
      'Basic ' + Buffer.from(`admin:${ADMIN_TOKEN}`).toString('base64'),
      'Token ' + ADMIN_TOKEN,
      ADMIN_TOKEN,
      'Bearer  ' + ADMIN_TOKEN,
      'Bearer ' + ADMIN_TOKEN + 'x',
      'Bearer ' + ADMIN_TOKEN + ', Bearer x',
      'Bearer ' + ADMIN_TOKEN.toUpperCase(),
      'Bearer ' + ADMIN_TOKEN.slice(1),
      'Bearer x' + ADMIN_TOKEN,
      // Every prefix of the real token, and same-length guesses differing in one place.
      ...Array.from({ length: ADMIN_TOKEN.length }, (_, n) => 'Bearer ' + ADMIN_TOKEN.slice(0, n)),
      ...Array.from(
        { length: ADMIN_TOKEN.length },
        (_, n) => 'Bearer ' + ADMIN_TOKEN.slice(0, n) + (ADMIN_TOKEN[n] === 'a' ? 'b' : 'a') + ADMIN_TOKEN.slice(n + 1),
      ),
      // Other lengths and shapes.
      ...[1, 16, 64, 256, 4096].map((n) => 'Bearer ' + 'A'.repeat(n)),
      'Bearer ' + '\u00e9'.repeat(10),
      'Bearer null',
      'Bearer undefined',
      'Bearer ' + JSON.stringify({ token: ADMIN_TOKEN }),
    ];
    const calls: Array<[string, string, unknown]> = [
      ['POST', '/admin/products', { name: 'stolen', stock: 10, segments: 1 }],
      ['GET', `/admin/products/${productId}`, undefined],
      ['POST', `/admin/products/${productId}/rebalance`, { segments: 1 }],
    ];
    const results = await pooled(
      guesses.flatMap((auth) =>
        calls.map(
          ([m, p, body]) =>
            () =>
              send(m, p, body, auth === '' ? {} : { authorization: auth }),
        ),
      ),
      64,
    );
    expect(results.filter((r) => r.status !== 401).map((r) => `${r.status} ${r.text}`)).toEqual([]);
    // One body for all: nothing says how close a guess came.
    expect(new Set(results.map((r) => r.text)).size).toBe(1);
    expect(results[0].body).toEqual({ statusCode: 401, code: 'UNAUTHENTICATED', message: expect.any(String) });
    expect(await counts()).toEqual(before);
    // The real token still works: the guesses locked nothing out.
    expect((await send('GET', `/admin/products/${productId}`, undefined, admin)).status).toBe(200);
  });

  it('should refuse absurd numbers with 400 or 404, changing nothing', async () => {
    const before = await counts();
    const raw = (s: string) => send('POST', '/orders', s);
    const numbers = [
      `{"userId":"n1","productId":1e308}`,
      `{"userId":"n2","productId":1e400}`,
      `{"userId":"n3","productId":-1e400}`,
      `{"userId":"n4","productId":123456789012345678901234567890}`,
      `{"userId":"n5","productId":9007199254740993}`,
      `{"userId":"n6","productId":2147483648}`,
      `{"userId":"n7","productId":-0}`,
      `{"userId":"n8","productId":${productId}.5}`,
      `{"userId":"n9","productId":"${productId}"}`,
      `{"userId":"n10","productId":${productId},"quantity":1e20}`,
      `{"userId":"n11","productId":${productId},"quantity":-1}`,
      `{"userId":"n12","productId":${productId},"quantity":4}`,
      `{"userId":"n13","productId":${productId},"quantity":2147483648}`,
      `{"userId":1e21,"productId":${productId}}`,
      `{"userId":123456789012345678901234567890,"productId":${productId}}`,
      `{"userId":-5,"productId":${productId}}`,
      `{"userId":0,"productId":${productId}}`,
    ];
    const answers = await Promise.all(numbers.map(async (b) => ({ b, status: (await raw(b)).status })));
    expect(answers.filter((x) => x.status !== 400 && x.status !== 404)).toEqual([]);
    // An id that is no id is a bad request, not an unknown order or product.
    for (const path of ['/orders/99999999999999999999999', '/orders/-1', '/orders/1e3', '/orders/0x10']) {
      expect((await send('GET', path, undefined, shop)).status).toBe(400);
    }
    for (const id of ['99999999999', '1e3', '-1', '0', '2147483648']) {
      expect((await send('GET', `/admin/products/${id}`, undefined, admin)).status).toBe(400);
    }
    const product = await send('POST', '/admin/products', { name: 'huge', stock: 1e10, segments: 1e6 }, admin);
    expect(product.status).toBe(400);
    expect(await counts()).toEqual(before);
  });

  it('should refuse control and unicode characters in ids and names with 4xx, changing nothing', async () => {
    const before = await counts();
    const userIds = [
      'a\u0000b',
      'a\nb',
      'a\rb',
      '\t',
      'a b',
      '\u202eevil',
      '\u200b',
      'ü',
      '👍',
      'a/b',
      '../../etc/passwd',
      '%00',
      '\ud800',
      "'; DROP TABLE orders; --",
      'x'.repeat(65),
    ];
    for (const userId of userIds) {
      const r = await send('POST', '/orders', { userId, productId });
      expect({ userId, status: r.status, code: r.body?.code }).toEqual({
        userId,
        status: 400,
        code: 'VALIDATION_FAILED',
      });
    }
    for (const path of [
      '/orders/%00',
      '/orders/1%0A',
      '/orders/%F0%9F%91%8D',
      '/orders/%E0%A4%A',
      '/orders/..%2f..%2fetc%2fpasswd',
      '/orders/%D9%A1',
    ]) {
      const r = await send('GET', path, undefined, shop);
      expect({ path, ok: r.status >= 400 && r.status < 500 }).toEqual({ path, ok: true });
    }
    for (const path of ['/admin/products/%00', '/admin/products/%E0%A4%A', '/admin/products/%D9%A1']) {
      const r = await send('GET', path, undefined, admin);
      expect({ path, ok: r.status >= 400 && r.status < 500 }).toEqual({ path, ok: true });
    }
    for (const name of ['nul\u0000name', '\u0007bell', '']) {
      const r = await send('POST', '/admin/products', { name, stock: 1, segments: 1 }, admin);
      expect({ name, status: r.status }).toEqual({ name, status: 400 });
    }
    expect(await counts()).toEqual(before);
  });

  it('should refuse deeply nested and hostile JSON with 4xx, changing nothing, and keep serving', async () => {
    const before = await counts();
    const deep = (n: number, open: string, close: string, inner = '1') => open.repeat(n) + inner + close.repeat(n);
    const hostile = [
      `{"userId":${deep(5000, '[', ']')},"productId":${productId}}`,
      `{"userId":"u1","productId":${productId},"x":${deep(2000, '{"a":', '}')}}`,
      deep(7000, '[', ']'),
      `{"userId":"u2","productId":${deep(3000, '{"a":', '}')}}`,
      `{"__proto__":{"userId":"u3"},"productId":${productId}}`,
      `{"userId":"u6","userId":{"$gt":""},"productId":${productId}}`,
      `{"userId":"u7","productId":${productId}`,
      `[{"userId":"u8","productId":${productId}}]`,
      `"just a string"`,
      `null`,
    ];
    const answers = await Promise.all(
      hostile.map(async (b) => ({ b: b.slice(0, 60), status: (await send('POST', '/orders', b)).status })),
    );
    expect(answers.filter((x) => x.status < 400 || x.status >= 500)).toEqual([]);
    expect(await counts()).toEqual(before);
    // Past the body limit: 413, not a parse of megabytes.
    const big = await send('POST', '/orders', deep(20_000, '[', ']'));
    expect(big.status).toBe(413);
    expect(await counts()).toEqual(before);
    // Still healthy, still selling.
    expect((await send('GET', '/health')).status).toBe(200);
    expect((await order('after-abuse')).status).toBe(201);
  });

  it('should neither set a field nor pollute a prototype through __proto__ or constructor keys', async () => {
    // Keys naming Object.prototype members are dropped by the body mapping (not refused, unlike
    // other unknown fields): an order may go through, but only as the plain order it names.
    for (const [userId, extra] of [
      ['proto-1', '"__proto__":{"quantity":3}'],
      ['proto-2', '"constructor":{"prototype":{"userId":"polluted","quantity":3}}'],
    ]) {
      const r = await send('POST', '/orders', `{"userId":"${userId}","productId":${productId},${extra}}`);
      const harmless = r.status === 400 || (r.status === 201 && r.body.userId === userId && r.body.quantity === 1);
      expect({ userId, reply: r.text, harmless }).toMatchObject({ harmless: true });
    }
    // Nothing leaked into the service's prototypes: a body without userId is still refused.
    expect(await send('POST', '/orders', { productId })).toMatchObject({
      status: 400,
      body: { code: 'VALIDATION_FAILED' },
    });
    const polluted = await withPg(
      pg.url,
      async (db) => (await db.query("SELECT count(*)::int AS n FROM orders WHERE user_id = 'polluted'")).rows[0].n,
    );
    expect(polluted).toBe(0);
  });

  it('should show no stack trace, error class, file path or SQL in any reply of this spec', () => {
    expect(bodies.length).toBeGreaterThan(400);
    expect(bodies.filter((text) => leaksInternals(text)).map((text) => text.slice(0, 300))).toEqual([]);
  });
});
