// The benchmark's peers (bench/peers) against the test run's PostgreSQL and Redis: each, started
// as the benchmark starts it, must sell exactly the stock under a storm of concurrent orders with
// duplicate users, answer in the service's status codes and error shape, and pass its audit.
import Redis from 'ioredis';
import {
  LuaPeerAudit,
  auditLuaPeer,
  insertProduct,
  luaPeerAuditProblems,
  PeerEnv,
  PeerKind,
  RunningPeer,
  startPeer,
} from '../peers';
import { auditProduct, resetState, withDb } from '../../test/support/database';
import { freePort } from '../../src/infrastructure/free-port';
import { pooled, Reply, request, testUrls } from '../../test/support/service';

const STOCK = 40;
const BUYERS = 240;
/** Buyers 0..59 send two orders at the same moment. */
const DOUBLE_SENDERS = 60;

const createProduct = (stock: number, segments: number) =>
  withDb((db) => insertProduct(db, { name: 'peer test', stock, segments }));

type Timed = Reply & { userId: string; sentAt: number; receivedAt: number };

async function storm(peer: RunningPeer, productId: number): Promise<Timed[]> {
  const tasks: Array<() => Promise<Timed>> = [];
  for (let i = 0; i < BUYERS; i++) {
    const userId = `peer-buyer-${i}`;
    const send = async () => {
      const sentAt = performance.now();
      const r = await request(peer.url, 'POST', '/orders', { userId, productId });
      return { ...r, userId, sentAt, receivedAt: performance.now() };
    };
    tasks.push(send);
    if (i < DOUBLE_SENDERS) tasks.push(send);
  }
  return pooled(tasks, 100);
}

/** The invariants every peer keeps, checked from the answers and from PostgreSQL. */
async function expectSoldExactlyOnce(replies: Timed[], productId: number): Promise<void> {
  const created = replies.filter((r) => r.status === 201);
  const counts: Record<string, number> = {};
  for (const r of replies) {
    const key = r.status === 201 ? '201' : `${r.status} ${r.body?.code}`;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  // Only the outcomes the benchmark counts; LOCK_WAIT_MS is long, so no BUSY under this load.
  expect(
    Object.keys(counts).filter(
      (k) => !['201', '409 ALREADY_ORDERED', '409 ORDER_IN_PROGRESS', '410 SOLD_OUT'].includes(k),
    ),
  ).toEqual([]);
  expect(created.length).toBe(STOCK);
  for (const r of replies.filter((x) => x.status !== 201)) {
    expect(Object.keys(r.body).sort()).toEqual(['code', 'message', 'statusCode']);
    expect(r.body.statusCode).toBe(r.status);
  }
  // No false sold-out: a 201 sent after a 410 came back would prove units were left then.
  const lastCreatedSend = Math.max(...created.map((r) => r.sentAt));
  expect(replies.filter((r) => r.status === 410 && r.receivedAt < lastCreatedSend)).toHaveLength(0);
  expect(new Set(created.map((r) => r.userId)).size).toBe(STOCK);

  const rows = await withDb(
    async (db) =>
      (await db.query('SELECT id, user_id, quantity FROM orders WHERE product_id = $1', [productId])).rows as Array<{
        id: string;
        user_id: string;
        quantity: number;
      }>,
  );
  expect(rows).toHaveLength(STOCK);
  // A bare peer has no event stream: its sessions keep the outbox triggers from writing (nor sold out).
  const events = await withDb(
    async (db) =>
      (await db.query('SELECT count(*)::int AS n FROM order_events WHERE product_id = $1', [productId])).rows[0].n,
  );
  expect(events).toBe(0);
  expect(new Set(rows.map((r) => r.user_id)).size).toBe(STOCK);
  expect(rows.reduce((sum, r) => sum + r.quantity, 0)).toBe(STOCK);
  const byId = new Map(rows.map((r) => [Number(r.id), r.user_id]));
  for (const r of created) {
    expect(r.body).toMatchObject({ productId, userId: r.userId, quantity: 1 });
    expect(byId.get(r.body.id)).toBe(r.userId);
  }
}

describe('benchmark peers', () => {
  const running: RunningPeer[] = [];
  const start = async (kind: PeerKind, env: Partial<PeerEnv> = {}) => {
    const peer = await startPeer(kind, { ...testUrls(), lockWaitMs: 30_000, ...env });
    running.push(peer);
    return peer;
  };

  beforeAll(() => resetState());
  afterEach(async () => {
    await Promise.all(running.splice(0).map((p) => p.stop()));
  });

  describe.each([
    ['bare, Redis segment locks, 8 segments', 'redlock', 8, 0],
    ['bare, one lock (1 segment)', 'redlock', 1, 0],
    ['bare, Redis segment locks held 5 ms, 8 segments', 'redlock', 8, 5],
    ['bare, no Redis lock (row locks only), 8 segments', 'database', 8, 0],
    ['bare, no Redis lock, row locks held 5 ms, 8 segments', 'database', 8, 5],
  ] as const)('%s', (_name, locking, segments, holdMs) => {
    it('should sell exactly the stock, one order per user, every 201 a row, and pass the PostgreSQL audit', async () => {
      const peer = await start('bare', { locking, holdMs });
      const productId = await createProduct(STOCK, segments);
      const replies = await storm(peer, productId);
      await expectSoldExactlyOnce(replies, productId);
      expect(await auditProduct(productId)).toMatchObject({
        totalStock: STOCK,
        remaining: 0,
        ordered: STOCK,
        negativeSegments: 0,
        duplicateUsers: 0,
      });
      // Sold out: the next buyer learns it from PostgreSQL, a buyer who has an order learns that.
      const late = await request(peer.url, 'POST', '/orders', { userId: 'late-buyer', productId });
      expect([late.status, late.body.code]).toEqual([410, 'SOLD_OUT']);
      const again = await request(peer.url, 'POST', '/orders', {
        userId: replies.find((r) => r.status === 201)!.userId,
        productId,
      });
      expect([again.status, again.body.code]).toEqual([409, 'ALREADY_ORDERED']);
    });
  });

  describe('bare-lua', () => {
    it('should sell exactly the stock, one order per user, every 201 a row, and pass the Redis + PostgreSQL audit', async () => {
      const peer = await start('bare-lua', { holdMs: 5 });
      const productId = await createProduct(STOCK, 4);
      const replies = await storm(peer, productId);
      await expectSoldExactlyOnce(replies, productId);
      const audit = await withDb((db) => auditLuaPeer(db, testUrls().redisUrl, productId));
      expect(luaPeerAuditProblems(audit)).toEqual([]);
      expect(audit).toMatchObject<Partial<LuaPeerAudit>>({
        totalStock: STOCK,
        remaining: 0,
        ordered: STOCK,
        orders: STOCK,
        segmentsUntouched: true,
      });
    });

    it('should give the unit and the buyer back and answer 503 with Retry-After when the INSERT fails', async () => {
      const peer = await start('bare-lua');
      const productId = await createProduct(2, 1);
      // PostgreSQL refuses this one user's order row; nothing else changes.
      await withDb((db) =>
        db.query("ALTER TABLE orders ADD CONSTRAINT peer_test_refuse CHECK (user_id <> 'refused-buyer') NOT VALID"),
      );
      let refused: Reply;
      try {
        refused = await request(peer.url, 'POST', '/orders', { userId: 'refused-buyer', productId });
      } finally {
        await withDb((db) => db.query('ALTER TABLE orders DROP CONSTRAINT peer_test_refuse'));
      }
      expect([refused.status, refused.body.code, refused.headers['retry-after']]).toEqual([503, 'UNAVAILABLE', '1']);
      const afterRefusal = await withDb((db) => auditLuaPeer(db, testUrls().redisUrl, productId));
      expect(afterRefusal).toMatchObject({ remaining: 2, ordered: 0 });
      // The buyer was forgotten, so the same user may buy; both units are still there to sell.
      const retried = await request(peer.url, 'POST', '/orders', { userId: 'refused-buyer', productId });
      const other = await request(peer.url, 'POST', '/orders', { userId: 'other-buyer', productId });
      const third = await request(peer.url, 'POST', '/orders', { userId: 'third-buyer', productId });
      expect([retried.status, other.status, third.status, third.body.code]).toEqual([201, 201, 410, 'SOLD_OUT']);
      expect(luaPeerAuditProblems(await withDb((db) => auditLuaPeer(db, testUrls().redisUrl, productId)))).toEqual([]);
    });

    it('should answer 409 ALREADY_ORDERED and put the unit back when PostgreSQL holds the order the Redis buyer set lost', async () => {
      const peer = await start('bare-lua');
      const productId = await createProduct(3, 1);
      const first = await request(peer.url, 'POST', '/orders', { userId: 'loyal-buyer', productId });
      expect(first.status).toBe(201);
      // Redis forgets everything (a restart without persistence): the count is reloaded from PostgreSQL.
      const redis = new Redis(testUrls().redisUrl);
      await redis.flushall();
      redis.disconnect();
      const again = await request(peer.url, 'POST', '/orders', { userId: 'loyal-buyer', productId });
      expect([again.status, again.body.code]).toEqual([409, 'ALREADY_ORDERED']);
      const audit = await withDb((db) => auditLuaPeer(db, testUrls().redisUrl, productId));
      expect(luaPeerAuditProblems(audit)).toEqual([]);
      expect(audit).toMatchObject({ remaining: 2, ordered: 1 });
    });
  });

  it('should answer bad input with 400 VALIDATION_FAILED and an unknown product with 404, in the service error shape', async () => {
    for (const kind of ['bare', 'bare-lua'] as const) {
      const peer = await start(kind);
      const bad = await request(peer.url, 'POST', '/orders', { userId: 'bad user', productId: 1 });
      expect([bad.status, bad.body.code, typeof bad.body.message]).toEqual([400, 'VALIDATION_FAILED', 'string']);
      const missing = await request(peer.url, 'POST', '/orders', { userId: 'u1', productId: 999_999 });
      expect([missing.status, missing.body.code]).toEqual([404, 'PRODUCT_NOT_FOUND']);
    }
  });

  it('should answer 503 UNAVAILABLE with Retry-After, not hang, when Redis or PostgreSQL does not answer', async () => {
    const productId = await createProduct(5, 1);
    const nowhere = await freePort();
    const cases: Array<[PeerKind, Partial<PeerEnv>]> = [
      ['bare', { redisUrl: `redis://127.0.0.1:${nowhere}` }],
      ['bare', { databaseUrl: `postgres://nobody@127.0.0.1:${nowhere}/flashsale_test` }],
      ['bare-lua', { redisUrl: `redis://127.0.0.1:${nowhere}` }],
      ['bare-lua', { databaseUrl: `postgres://nobody@127.0.0.1:${nowhere}/flashsale_test` }],
    ];
    for (const [kind, env] of cases) {
      const peer = await start(kind, env);
      const started = Date.now();
      const r = await request(peer.url, 'POST', '/orders', { userId: 'stranded', productId });
      expect({ kind, env, status: r.status, code: r.body.code, retryAfter: r.headers['retry-after'] }).toEqual({
        kind,
        env,
        status: 503,
        code: 'UNAVAILABLE',
        retryAfter: '1',
      });
      expect(Date.now() - started).toBeLessThan(10_000);
    }
  });
});
