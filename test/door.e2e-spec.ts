// The door (docs/design.md, "The door"; invariants I3 and I9) across two service processes on the
// real PostgreSQL and Redis: refusals of a sold-out product answered from memory (each statement
// in PostgreSQL's pg_stat_statements and each command in Redis's commandstats named), returned units on sale again within
// SOLD_OUT_STALE_MS on the other process (also when the Redis sold-out flag's clearing was lost),
// rate limits shared by the processes and kept when Redis is away, and hostile tokens.
import { SignJWT, UnsecuredJWT } from 'jose';
import { FaultRedis, metric } from './faults/support';
import { sleep, waitFor } from './support/wait';
import { CLOCK } from '../src/waiting-room/waiting-room.repository';
import { EVENT_CLOCK } from '../src/events/events.repository';
import { callsBetween, redisCommandCalls, resetState, statementCalls, withDb } from './support/database';
import {
  admin,
  ADMIN_TOKEN,
  createProduct,
  pooled,
  Reply,
  request,
  ServiceProcess,
  shop,
  SHOP_TOKEN,
  startedTogether,
  startService,
  testUrls,
} from './support/service';

const STALE_MS = 100;
const REFUSAL_STALE_MS = 2000;

async function teachSoldOut(svc: ServiceProcess, productId: number, prefix: string): Promise<void> {
  // A few refusals on the order path make the process learn the product (one read); then it answers from memory.
  let n = 0;
  await waitFor(`${svc.url} to refuse product ${productId} from memory`, async () => {
    const r = await request(svc.url, 'POST', '/orders', { userId: `${prefix}-${n++}`, productId });
    expect(r.status).toBe(410);
    return (await metric(svc.url, 'flashsale_in_process_refusals_total')) > 0;
  });
}

async function liveOrders(productId: number): Promise<Map<string, number>> {
  return withDb(async (db) => {
    const { rows } = await db.query<{ user_id: string; id: string }>(
      `SELECT user_id, id::text AS id FROM orders WHERE product_id = $1 AND status IN ('reserved', 'paid')`,
      [productId],
    );
    return new Map(rows.map((r) => [r.user_id, Number(r.id)]));
  });
}

async function sellOut(
  base: string,
  stock: number,
  segments: number,
  prefix: string,
  terms: Record<string, unknown> = {},
) {
  const product = await createProduct(base, { stock, segments, ...terms });
  const answers = await pooled(
    Array.from(
      { length: stock },
      (_, i) => () => request(base, 'POST', '/orders', { userId: `${prefix}-${i}`, productId: product.id }),
    ),
    16,
  );
  expect(answers.map((r) => r.status)).toEqual(answers.map(() => 201));
  return { product, orders: answers.map((r) => r.body as { id: number; userId: string }) };
}

describe('the door: refusals from memory, across two processes', () => {
  let a: ServiceProcess;
  let b: ServiceProcess;

  beforeAll(async () => {
    await resetState();
    // No sweep: every statement counted is one a refusal caused, or the board's poll (counted apart).
    // A bound of 2 s, so that a poll slowed down by this busy machine (the 100 ms default has
    // 75 ms of slack) cannot make an entry lapse and send refusals down the order path mid-count.
    // No report to the operator page (LIVE_STATS_MS=0): its one MULTI a second per process is
    // Redis traffic of its own, not a refusal's.
    const env = { EXPIRY_SWEEP_MS: '0', SOLD_OUT_STALE_MS: String(REFUSAL_STALE_MS), LIVE_STATS_MS: '0' };
    [a, b] = await startedTogether([startService(env), startService(env)]);
  });
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
  });

  it('should refuse a storm on a sold-out product with no PostgreSQL statement and no Redis command, 409 with the right orderId to holders', async () => {
    const { product } = await sellOut(a.url, 40, 4, 'holder');
    await teachSoldOut(a, product.id, 'warm-a');
    await teachSoldOut(b, product.id, 'warm-b');
    const holders = await liveOrders(product.id);
    expect(holders.size).toBe(40);

    // What a process runs by the clock, whatever the load, tagged in its SQL: the board's poll (per
    // process and time, bounded below), the waiting room's admitter looking for rooms, the event
    // pruner. Anything else that ran in the window was a refusal's doing.
    const POLL = 'sold-out board poll';
    const byTheClock = [POLL, CLOCK, EVENT_CLOCK];
    const fromMemory = async () =>
      (await metric(a.url, 'flashsale_in_process_refusals_total')) +
      (await metric(b.url, 'flashsale_in_process_refusals_total'));
    const fromMemoryBefore = await fromMemory();
    const [pgBefore, redisBefore] = [await statementCalls(), await redisCommandCalls()];
    const started = Date.now();
    const pick = (i: number) => (i % 2 === 0 ? a : b).url;
    const newcomers = Array.from({ length: 2000 }, (_, i) => async () => ({
      userId: `late-${i}`,
      r: await request(pick(i), 'POST', '/orders', { userId: `late-${i}`, productId: product.id }),
    }));
    const again = [...holders.keys()].map((userId, i) => async () => ({
      userId,
      r: await request(pick(i + 1), 'POST', '/orders', { userId, productId: product.id }),
    }));
    const answers = await pooled([...newcomers, ...again], 64);
    const elapsedMs = Date.now() - started;
    const [pgAfter, redisAfter] = [await statementCalls(), await redisCommandCalls()];
    const fromMemoryAfter = await fromMemory();

    const late = answers.filter((x) => x.userId.startsWith('late-'));
    expect(
      late.filter((x) => x.r.status !== 410 || x.r.body.code !== 'SOLD_OUT').map((x) => `${x.userId}: ${x.r.status}`),
    ).toEqual([]);
    const told = answers.filter((x) => !x.userId.startsWith('late-'));
    expect(told.map((x) => [x.userId, x.r.status, x.r.body.code, x.r.body.orderId])).toEqual(
      told.map((x) => [x.userId, 409, 'ALREADY_ORDERED', holders.get(x.userId)]),
    );
    // The bodies the order path would give, in the service's one error shape.
    expect([late[0].r.body, told[0].r.body]).toEqual([
      { statusCode: 410, code: 'SOLD_OUT', message: 'sold out' },
      {
        statusCode: 409,
        code: 'ALREADY_ORDERED',
        message: 'this user already has an order for this product',
        orderId: holders.get(told[0].userId),
      },
    ]);
    // Every refusal answered from memory, and nothing but the clock's statements ran: a failure
    // names each statement and command the refusals caused.
    const ran = callsBetween(pgBefore, pgAfter);
    const byRefusals = Object.fromEntries(Object.entries(ran).filter(([q]) => !byTheClock.some((t) => q.includes(t))));
    expect({
      answeredFromMemory: fromMemoryAfter - fromMemoryBefore,
      statements: byRefusals,
      redisCommands: callsBetween(redisBefore, redisAfter),
    }).toEqual({ answeredFromMemory: answers.length, statements: {}, redisCommands: {} });
    // The polls are per process and time (one per SOLD_OUT_STALE_MS / 4 each), not per refusal.
    const polls = Object.entries(ran)
      .filter(([q]) => q.includes(POLL))
      .reduce((n, [, calls]) => n + calls, 0);
    expect(polls).toBeLessThanOrEqual(2 * (Math.ceil(elapsedMs / (REFUSAL_STALE_MS / 4)) + 2));
    expect(await liveOrders(product.id)).toEqual(holders);
  });

  it('should still answer bad input with 400, a closed sale with 403 and a quantity over the limit with 400 for a sold-out product', async () => {
    const { product } = await sellOut(a.url, 4, 2, 'terms');
    await teachSoldOut(a, product.id, 'terms-warm');
    const cases: Array<[unknown, number, string]> = [
      [{ userId: 'bad user', productId: product.id }, 400, 'VALIDATION_FAILED'],
      [{ userId: 'ok-1', productId: product.id, quantity: 0 }, 400, 'VALIDATION_FAILED'],
      [{ userId: 'ok-1', productId: product.id, quantity: 2 }, 400, 'QUANTITY_OVER_LIMIT'],
      [{ userId: 'ok-1', productId: product.id, extra: true }, 400, 'VALIDATION_FAILED'],
    ];
    for (const [body, status, code] of cases) {
      const r = await request(a.url, 'POST', '/orders', body);
      expect([r.status, r.body.code]).toEqual([status, code]);
    }
  });
});

describe("the door: a sold-out product's terms lapsed with a late poll", () => {
  let a: ServiceProcess;

  beforeAll(async () => {
    await resetState();
    // The board's entries stay fresh for 2 s (a poll every 500 ms), the product's terms (limit,
    // window) for 50 ms only: as when a loaded machine runs the poll that refreshes them late.
    [a] = await startedTogether([
      startService({
        EXPIRY_SWEEP_MS: '0',
        SOLD_OUT_STALE_MS: String(REFUSAL_STALE_MS),
        PRODUCT_CACHE_MS: '50',
        LIVE_STATS_MS: '0',
      }),
    ]);
  });
  afterAll(async () => {
    await a?.stop();
  });

  it("should wait for the board's next poll, which brings the terms, and refuse from memory: no statement but the poll's, no Redis command", async () => {
    const { product } = await sellOut(a.url, 4, 2, 'lapse');
    await teachSoldOut(a, product.id, 'lapse-warm');
    const fromMemoryBefore = await metric(a.url, 'flashsale_in_process_refusals_total');
    const [pgBefore, redisBefore] = [await statementCalls(), await redisCommandCalls()];
    const answers: Reply[] = [];
    // One at a time, each after the terms of the one before have lapsed.
    for (let i = 0; i < 30; i++) {
      answers.push(await request(a.url, 'POST', '/orders', { userId: `lapsed-${i}`, productId: product.id }));
      await sleep(60);
    }
    const [pgAfter, redisAfter] = [await statementCalls(), await redisCommandCalls()];
    expect(answers.map((r) => `${r.status} ${r.body.code}`)).toEqual(answers.map(() => '410 SOLD_OUT'));
    const byTheClock = ['sold-out board poll', CLOCK, EVENT_CLOCK];
    const ran = callsBetween(pgBefore, pgAfter);
    expect({
      answeredFromMemory: (await metric(a.url, 'flashsale_in_process_refusals_total')) - fromMemoryBefore,
      statements: Object.fromEntries(Object.entries(ran).filter(([q]) => !byTheClock.some((t) => q.includes(t)))),
      redisCommands: callsBetween(redisBefore, redisAfter),
    }).toEqual({ answeredFromMemory: answers.length, statements: {}, redisCommands: {} });
  });
});

describe('the door: returned units reach every process within SOLD_OUT_STALE_MS (I3)', () => {
  let a: ServiceProcess;
  let b: ServiceProcess;

  beforeAll(async () => {
    await resetState();
    // Only a sweeps, so an expiry is always a's; the bound is the default's.
    [a, b] = await Promise.all([
      startService({ SOLD_OUT_STALE_MS: String(STALE_MS), EXPIRY_SWEEP_MS: '100' }),
      startService({ EXPIRY_SWEEP_MS: '0' }),
    ]);
  });
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
  });

  /** One order of a new buyer on b, sent once the bound has passed since `returnedAt`: it must be sold. */
  async function boughtOnBAfterTheBound(productId: number, returnedAt: number, buyer: string): Promise<Reply> {
    const wait = returnedAt + STALE_MS + 5 - Date.now();
    if (wait > 0) await sleep(wait);
    return request(b.url, 'POST', '/orders', { userId: buyer, productId });
  }

  async function soldOutEverywhere(stock: number, prefix: string, terms: Record<string, unknown> = {}) {
    const sale = await sellOut(a.url, stock, 2, prefix, terms);
    await teachSoldOut(a, sale.product.id, `${prefix}-warm-a`);
    await teachSoldOut(b, sale.product.id, `${prefix}-warm-b`);
    return sale;
  }

  it('should sell on b the unit a cancel on a returned', async () => {
    const { product, orders } = await soldOutEverywhere(6, 'cancel');
    const cancel = await request(a.url, 'POST', `/orders/${orders[0].id}/cancel`, { userId: orders[0].userId }, shop);
    expect(cancel.status).toBe(200);
    const r = await boughtOnBAfterTheBound(product.id, Date.now(), 'cancel-next');
    expect([r.status, r.body.code]).toEqual([201, undefined]);
  });

  it('should sell on b the unit an expiry on a returned', async () => {
    const { product, orders } = await soldOutEverywhere(4, 'expiry');
    // The reservation's time runs out now (as a clock would have it), and a's sweep expires it.
    await withDb((db) => db.query('UPDATE orders SET expires_at = now() WHERE id = $1', [orders[0].id]));
    const expiredAt = await waitFor('the sweep on a to expire the reservation', async () =>
      withDb(async (db) =>
        (await db.query('SELECT status FROM orders WHERE id = $1', [orders[0].id])).rows[0].status === 'expired'
          ? Date.now()
          : 0,
      ),
    );
    const r = await boughtOnBAfterTheBound(product.id, expiredAt, 'expiry-next');
    expect(r.status).toBe(201);
  });

  it('should sell on b the units a restock on a added', async () => {
    const { product } = await soldOutEverywhere(4, 'restock');
    const restock = await request(a.url, 'POST', `/admin/products/${product.id}/restock`, { units: 1 }, admin);
    expect(restock.status).toBe(200);
    const r = await boughtOnBAfterTheBound(product.id, Date.now(), 'restock-next');
    expect(r.status).toBe(201);
  });

  it('should sell on b, in the new layout, the unit a cancel returned after a rebalance on a', async () => {
    const { product, orders } = await soldOutEverywhere(6, 'rebalance');
    expect(
      (await request(a.url, 'POST', `/admin/products/${product.id}/rebalance`, { segments: 5 }, admin)).status,
    ).toBe(200);
    // b may have relearnt the product in its new layout before the cancel: the bound holds from the cancel.
    await teachSoldOut(b, product.id, 'rebalance-rewarm');
    expect(
      (await request(a.url, 'POST', `/orders/${orders[1].id}/cancel`, { userId: orders[1].userId }, shop)).status,
    ).toBe(200);
    const r = await boughtOnBAfterTheBound(product.id, Date.now(), 'rebalance-next');
    expect(r.status).toBe(201);
  });

  it('should sell on b the unit a cancel returned even when the Redis sold-out flag is set again (its clearing lost)', async () => {
    const { product, orders } = await soldOutEverywhere(6, 'lost');
    expect(
      (await request(a.url, 'POST', `/orders/${orders[2].id}/cancel`, { userId: orders[2].userId }, shop)).status,
    ).toBe(200);
    const returnedAt = Date.now();
    // As if the clearing never reached Redis (a restart, a failover): the flag says sold out.
    const { default: Redis } = await import('ioredis');
    const redis = new Redis(testUrls().redisUrl);
    try {
      await redis.set(`hint:soldout:{${product.id}}`, '1', 'PX', 60_000);
    } finally {
      redis.disconnect();
    }
    const r = await boughtOnBAfterTheBound(product.id, returnedAt, 'lost-next');
    expect(r.status).toBe(201);
    expect(await metric(b.url, 'flashsale_stale_sold_out_flags_total')).toBe(1);
  });
});

describe('the door: rate limits shared by the processes', () => {
  let a: ServiceProcess;
  let b: ServiceProcess;
  let notYet: { id: number };

  beforeAll(async () => {
    await resetState();
    // 3 calls per 3 s per user, none per address: the window outlasts each burst below.
    const env = { RATE_LIMIT_USER: '1,3', RATE_LIMIT_IP: '0' };
    [a, b] = await startedTogether([startService(env), startService(env)]);
    // Calls to a sale that has not started change nothing, whatever gets through the door.
    notYet = await createProduct(a.url, {
      stock: 10,
      segments: 2,
      startsAt: new Date(Date.now() + 3_600_000).toISOString(),
    });
  });
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
  });

  it("should share a user's budget between both processes: 3 calls pass, the rest 429 RATE_LIMITED with Retry-After", async () => {
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        request(i % 2 ? a.url : b.url, 'POST', '/orders', { userId: 'eager', productId: notYet.id }),
      ),
    );
    const passed = answers.filter((r) => r.status === 403);
    const limited = answers.filter((r) => r.status === 429);
    expect([passed.length, limited.length]).toEqual([3, 7]);
    for (const r of limited) {
      expect(r.body).toEqual({
        statusCode: 429,
        code: 'RATE_LIMITED',
        message: `too many calls from this user: retry after ${r.headers['retry-after']} s`,
      });
      expect(Number(r.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      expect(Number(r.headers['retry-after'])).toBeLessThanOrEqual(3);
    }
    // Another user has a budget of their own.
    expect((await request(a.url, 'POST', '/orders', { userId: 'calm', productId: notYet.id })).status).toBe(403);
    expect(
      await withDb(
        async (db) =>
          (await db.query('SELECT count(*)::int AS n FROM orders WHERE product_id = $1', [notYet.id])).rows[0].n,
      ),
    ).toBe(0);
  });
});

describe('the door: limits per address, TRUST_PROXY and Redis away', () => {
  let ownRedis: FaultRedis;
  let trusting: ServiceProcess;
  let direct: ServiceProcess;
  let productId: number;

  beforeAll(async () => {
    await resetState();
    ownRedis = await FaultRedis.start();
    const env = { REDIS_URL: ownRedis.url, RATE_LIMIT_USER: '1,3', RATE_LIMIT_IP: '1,3' };
    [trusting, direct] = await startedTogether([startService({ ...env, TRUST_PROXY: '127.0.0.1' }), startService(env)]);
    productId = (
      await createProduct(trusting.url, {
        stock: 10,
        segments: 2,
        startsAt: new Date(Date.now() + 3_600_000).toISOString(),
      })
    ).id;
  });
  afterAll(async () => {
    await Promise.all([trusting?.stop(), direct?.stop()]);
    await ownRedis?.stop();
  });

  const order = (svc: ServiceProcess, userId: string, xff?: string, from?: string) =>
    request(svc.url, 'POST', '/orders', { userId, productId }, xff ? { 'x-forwarded-for': xff } : {}, from);

  it('should count a forged first X-Forwarded-For hop against the address the trusted proxy saw', async () => {
    const answers = await Promise.all(
      Array.from({ length: 5 }, (_, i) => order(trusting, `via-proxy-${i}`, `198.51.100.${i}, 203.0.113.7`)),
    );
    expect(answers.map((r) => r.status).sort()).toEqual([403, 403, 403, 429, 429]);
    // Another client behind the same proxy has its own budget.
    expect((await order(trusting, 'via-proxy-other', '203.0.113.8')).status).toBe(403);
  });

  it('should ignore X-Forwarded-For without TRUST_PROXY: every forged address is the socket address', async () => {
    const answers = await Promise.all(
      Array.from({ length: 5 }, (_, i) => order(direct, `direct-${i}`, `198.51.100.${i}`)),
    );
    expect(answers.map((r) => r.status).sort()).toEqual([403, 403, 403, 429, 429]);
  });

  it('should keep limiting in each process on its own when Redis is away', async () => {
    await ownRedis.stop();
    try {
      // From an address of its own: the one above is held over budget in this process's memory.
      const first = await Promise.all(
        Array.from({ length: 5 }, () => order(direct, 'while-away', undefined, '127.0.0.2')),
      );
      // Within the process's own budget the call reaches the order path (403: the sale has not started).
      expect(first.map((r) => r.status).sort()).toEqual([403, 403, 403, 429, 429]);
      expect(await metric(direct.url, 'flashsale_rate_limit_fallbacks_total')).toBeGreaterThan(0);
    } finally {
      await ownRedis.start();
    }
  });
});

describe('the door: buyer identity and the shop token (I9)', () => {
  const SECRET = 'e2e-buyer-secret-0123456789abcdefgh';
  let a: ServiceProcess;
  let b: ServiceProcess;
  const key = new TextEncoder().encode(SECRET);
  const now = () => Math.floor(Date.now() / 1000);
  const tokenFor = (sub: string, claims: Record<string, unknown> = {}, secret = key) =>
    new SignJWT({ sub, exp: now() + 300, ...claims }).setProtectedHeader({ alg: 'HS256' }).sign(secret);
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

  beforeAll(async () => {
    await resetState();
    const env = { BUYER_JWT_SECRET: SECRET };
    [a, b] = await startedTogether([startService(env), startService(env)]);
  });
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
  });

  it('should sell to the user the token names, with or without the userId in the body, and let them read and cancel their own order', async () => {
    const product = await createProduct(a.url, { stock: 5, segments: 1 });
    const token = await tokenFor('alice');
    const first = await request(a.url, 'POST', '/orders', { productId: product.id }, bearer(token));
    expect([first.status, first.body.userId]).toEqual([201, 'alice']);
    const read = await request(b.url, 'GET', `/orders/${first.body.id}`, undefined, bearer(token));
    expect([read.status, read.body.id]).toEqual([200, first.body.id]);
    const cancel = await request(b.url, 'POST', `/orders/${first.body.id}/cancel`, undefined, bearer(token));
    expect([cancel.status, cancel.body.status]).toEqual([200, 'cancelled']);
    const again = await request(b.url, 'POST', '/orders', { userId: 'alice', productId: product.id }, bearer(token));
    expect(again.status).toBe(201);
  });

  it('should refuse every hostile token on every buyer, shop and admin call, changing nothing', async () => {
    const product = await createProduct(a.url, { stock: 5, segments: 1 });
    const victimToken = await tokenFor('victim');
    const victimOrder = (await request(a.url, 'POST', '/orders', { productId: product.id }, bearer(victimToken)))
      .body as { id: number };
    const before = await withDb(async (db) => ({
      orders: (await db.query('SELECT id, user_id, status FROM orders ORDER BY id')).rows,
      stock: (await db.query('SELECT product_id, idx, stock FROM stock_segments ORDER BY product_id, idx')).rows,
      products: (await db.query('SELECT count(*)::int AS n FROM products')).rows[0].n,
    }));

    const valid = await tokenFor('mallory');
    const [h, , s] = valid.split('.');
    const hostile: Array<[string, Record<string, string>]> = [
      ['no token', {}],
      ['a malformed token', bearer('not-a-jwt')],
      ['alg none', bearer(new UnsecuredJWT({ sub: 'victim', exp: now() + 300 }).encode())],
      [
        'another secret',
        bearer(await tokenFor('victim', {}, new TextEncoder().encode('another-secret-0123456789abcdefghij'))),
      ],
      ['an expired token', bearer(await tokenFor('victim', { exp: now() - 120 }))],
      ['a token not yet valid', bearer(await tokenFor('victim', { nbf: now() + 120 }))],
      [
        'a tampered payload',
        bearer(`${h}.${Buffer.from(JSON.stringify({ sub: 'victim', exp: now() + 300 })).toString('base64url')}.${s}`),
      ],
      ['a huge token', bearer(`${h}.${'A'.repeat(6000)}.${s}`)],
      ['the admin token as a buyer token', admin],
    ];
    const calls: Array<[string, string, string, unknown]> = [
      ['order', 'POST', '/orders', { userId: 'victim', productId: product.id }],
      ['read', 'GET', `/orders/${victimOrder.id}`, undefined],
      ['cancel', 'POST', `/orders/${victimOrder.id}/cancel`, { userId: 'victim' }],
      ['pay', 'POST', `/orders/${victimOrder.id}/pay`, { userId: 'victim' }],
    ];
    for (const [name, headers] of hostile) {
      for (const [call, method, path, body] of calls) {
        const r = await request(name.length % 2 ? a.url : b.url, method, path, body, headers);
        expect(`${name} / ${call}: ${r.status} ${r.body.code}`).toBe(`${name} / ${call}: 401 UNAUTHENTICATED`);
      }
      for (const [call, method, path, body] of [
        ['admin create', 'POST', '/admin/products', { name: 'x', stock: 1, segments: 1 }],
        ['admin read', 'GET', `/admin/products/${product.id}`, undefined],
      ] as const) {
        if (name.startsWith('the admin token')) continue;
        const r = await request(a.url, method, path, body, headers);
        expect(`${name} / ${call}: ${r.status} ${r.body.code}`).toBe(`${name} / ${call}: 401 UNAUTHENTICATED`);
      }
    }
    // Mallory's own valid token, acting for the victim.
    const m = bearer(valid);
    const mallory: Array<[string, Promise<Reply>, number, string]> = [
      [
        'order as the victim',
        request(a.url, 'POST', '/orders', { userId: 'victim', productId: product.id }, m),
        403,
        'IDENTITY_MISMATCH',
      ],
      [
        "read the victim's order",
        request(b.url, 'GET', `/orders/${victimOrder.id}`, undefined, m),
        404,
        'ORDER_NOT_FOUND',
      ],
      [
        "cancel the victim's order naming the victim",
        request(a.url, 'POST', `/orders/${victimOrder.id}/cancel`, { userId: 'victim' }, m),
        403,
        'IDENTITY_MISMATCH',
      ],
      [
        "cancel the victim's order as herself",
        request(b.url, 'POST', `/orders/${victimOrder.id}/cancel`, undefined, m),
        404,
        'ORDER_NOT_FOUND',
      ],
      [
        "pay the victim's order",
        request(a.url, 'POST', `/orders/${victimOrder.id}/pay`, { userId: 'victim' }, m),
        403,
        'FORBIDDEN',
      ],
      [
        'create a product',
        request(b.url, 'POST', '/admin/products', { name: 'x', stock: 1, segments: 1 }, m),
        401,
        'UNAUTHENTICATED',
      ],
    ];
    for (const [what, reply, status, code] of mallory) {
      const r = await reply;
      expect(`${what}: ${r.status} ${r.body.code}`).toBe(`${what}: ${status} ${code}`);
    }
    const after = await withDb(async (db) => ({
      orders: (await db.query('SELECT id, user_id, status FROM orders ORDER BY id')).rows,
      stock: (await db.query('SELECT product_id, idx, stock FROM stock_segments ORDER BY product_id, idx')).rows,
      products: (await db.query('SELECT count(*)::int AS n FROM products')).rows[0].n,
    }));
    expect(after).toEqual(before);
    // The shop pays with its own token.
    const paid = await request(b.url, 'POST', `/orders/${victimOrder.id}/pay`, { userId: 'victim' }, shop);
    expect([paid.status, paid.body.status]).toEqual([200, 'paid']);
  });

  it('should answer a valid token with no body, or a body that is not an object, with 400 VALIDATION_FAILED', async () => {
    const token = await tokenFor('bodiless');
    for (const body of [undefined, '[]', 'null', '"text"']) {
      const r = await request(a.url, 'POST', '/orders', body, bearer(token));
      expect(`${String(body)}: ${r.status} ${r.body.code}`).toBe(`${String(body)}: 400 VALIDATION_FAILED`);
    }
  });

  it('should tell the admin token and the shop token sent as a buyer token by name, never by value', async () => {
    const product = await createProduct(a.url, { stock: 1, segments: 1 });
    const asAdmin = await request(a.url, 'POST', '/orders', { productId: product.id }, admin);
    expect([asAdmin.status, asAdmin.body.code]).toEqual([401, 'UNAUTHENTICATED']);
    expect(asAdmin.body.message).toBe(
      "the bearer token is the admin token (ADMIN_TOKEN), not a buyer token: this call takes a buyer's JWT",
    );
    const asShop = await request(b.url, 'POST', '/orders', { productId: product.id }, shop);
    expect(asShop.body.message).toContain("the shop's token (SHOP_TOKEN), not a buyer token");
    expect(JSON.stringify([asAdmin.body, asShop.body])).not.toMatch(new RegExp(`${ADMIN_TOKEN}|${SHOP_TOKEN}`));
  });

  it('should document the three bearer schemes in OpenAPI', async () => {
    const doc = (await request(a.url, 'GET', '/docs-json')).body;
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual(['admin', 'buyer', 'shop']);
    expect(doc.paths['/orders'].post.security).toEqual([{ buyer: [] }]);
    expect(doc.paths['/orders/{id}/pay'].post.security).toEqual([{ shop: [] }]);
  });
});
