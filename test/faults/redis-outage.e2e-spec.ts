// Fault: the (only) Redis stops in the middle of a sale and comes back later on the same port, or
// freezes (SIGSTOP: connections open, no answers). Meanwhile every order must fail within the
// configured Redis timeout with 503 UNAVAILABLE and Retry-After (never a hang, never a 500); once
// it is back the service recovers by itself; PostgreSQL's books stay exact.
import { join } from 'node:path';
import { createProduct, request, ServiceProcess } from '../support/service';
import {
  brief,
  expectPromisesKept,
  FaultPostgres,
  FaultRedis,
  loadUntilStopped,
  Outcome,
  placeOrder,
  scratchDir,
  startFaultService,
  stopAll,
  tally,
} from './support';
import { waitFor } from '../support/wait';

const REDIS_TIMEOUT_MS = 300;
/**
 * Bound for any reply. An order in flight when Redis freezes can meet up to three timeouts in a
 * row (segment lock, Redlock's cleanup of the failed attempt, user lock release), each up to two
 * REDIS_TIMEOUT_MS with ioredis auto-pipelining (a command waits for the batch before it): 1.8 s,
 * plus slack for a busy 2-core machine.
 */
const REPLY_BOUND_MS = 3000;

describe('Redis outage during a sale', () => {
  const scratch = scratchDir('redis-outage');
  let pg: FaultPostgres;
  let redis: FaultRedis;
  let svc: ServiceProcess;

  beforeAll(async () => {
    [pg, redis] = await Promise.all([FaultPostgres.start(join(scratch.dir, 'pg')), FaultRedis.start()]);
    // A user lock left behind would hold for a minute: a buyer's next order within it tells.
    svc = await startFaultService(pg, redis, {
      REDIS_TIMEOUT_MS: String(REDIS_TIMEOUT_MS),
      USER_LOCK_TTL_MS: '60000',
      LOG_LEVEL: 'error',
    });
  });
  afterAll(async () => {
    await stopAll(
      () => svc?.stop(),
      () => redis?.stop(),
      () => pg?.stop(),
    );
    scratch.cleanup();
  });

  it('should answer 503 UNAVAILABLE with Retry-After fast while Redis is down, recover on its own, and lose no order', async () => {
    const product = await createProduct(svc.url, { stock: 100_000, segments: 20 });
    const load = loadUntilStopped({
      concurrency: 24,
      productId: product.id,
      prefix: 'r',
      pick: () => svc.url,
      pauseMs: 2,
    });
    const created = (from: number) => load.outcomes.filter((o) => o.status === 201 && o.sentAt >= from).length;

    await waitFor('orders before the outage', () => created(0) >= 50);
    const stopping = Date.now();
    await redis.stop();
    const down = Date.now();
    await waitFor(
      '503s while Redis is down',
      () => load.outcomes.filter((o) => o.sentAt >= down && o.status === 503).length >= 100,
    );
    // Readiness says which dependency is gone.
    const health = await request(svc.url, 'GET', '/health');
    expect(health.status).toBe(503);
    expect(health.body.details.redis).toMatchObject({ status: 'down', lockMasters: ['down'] });
    expect(health.body.details.postgres).toMatchObject({ status: 'up' });
    await waitFor('an outage of at least 1.5 s', () => Date.now() - down >= 1500);

    const restarting = Date.now();
    await redis.start();
    const up = Date.now();
    // Nothing is restarted or told: the service's Redis clients reconnect by themselves.
    await waitFor('orders to succeed again', () => created(up) >= 50, 15_000);
    const outcomes = await load.stop();
    expect((await request(svc.url, 'GET', '/health')).status).toBe(200);

    // Every reply came, and within the bound: no hang, no dropped connection.
    expect(outcomes.filter((o) => o.status === 0)).toEqual([]);
    expect(outcomes.filter((o) => o.doneAt - o.sentAt > REPLY_BOUND_MS).map(brief)).toEqual([]);
    // Only 201 or 503 with Retry-After; never a 500 or another error.
    expect(outcomes.filter((o) => o.status !== 201 && o.status !== 503).map(brief)).toEqual([]);
    expect(outcomes.filter((o) => o.status === 503 && o.retryAfter !== '1').map(brief)).toEqual([]);
    // Orders sent and answered wholly inside the outage all got UNAVAILABLE.
    const inside = outcomes.filter((o) => o.sentAt >= down && o.doneAt <= restarting);
    expect(inside.length).toBeGreaterThanOrEqual(100);
    expect(tally(inside)).toEqual({ '503 UNAVAILABLE': inside.length });
    expect(outcomes.filter((o) => o.sentAt >= stopping && o.code === 'UNAVAILABLE').length).toBeGreaterThanOrEqual(100);

    // I1, I2, every 201 persisted, and no order for a client that was told it failed.
    const books = await expectPromisesKept(pg.url, product.id, outcomes, { failedMeansNoOrder: true });
    expect(books.orders).toBe(outcomes.filter((o) => o.status === 201).length);
  });

  it('should answer 503 UNAVAILABLE within the Redis timeout while Redis is frozen, then recover, and lose no order', async () => {
    const product = await createProduct(svc.url, { stock: 100_000, segments: 20 });
    const load = loadUntilStopped({
      concurrency: 24,
      productId: product.id,
      prefix: 'f',
      pick: () => svc.url,
      pauseMs: 2,
    });
    const created = (from: number) => load.outcomes.filter((o) => o.status === 201 && o.sentAt >= from).length;

    await waitFor('orders before the freeze', () => created(0) >= 50);
    redis.freeze();
    const frozen = Date.now();
    await waitFor(
      '503s while Redis is frozen',
      () => load.outcomes.filter((o) => o.sentAt >= frozen && o.status === 503).length >= 50,
    );
    await waitFor('a freeze of at least 2 s', () => Date.now() - frozen >= 2000);
    const thawing = Date.now();
    redis.thaw();
    await waitFor('orders to succeed again', () => created(thawing) >= 50, 15_000);
    const outcomes = await load.stop();

    expect(outcomes.filter((o) => o.status === 0)).toEqual([]);
    expect(outcomes.filter((o) => o.doneAt - o.sentAt > REPLY_BOUND_MS).map(brief)).toEqual([]);
    expect(outcomes.filter((o) => o.status !== 201 && o.status !== 503).map(brief)).toEqual([]);
    expect(
      outcomes.filter((o) => o.status === 503 && (o.code !== 'UNAVAILABLE' || o.retryAfter !== '1')).map(brief),
    ).toEqual([]);
    const inside = outcomes.filter((o) => o.sentAt >= frozen && o.doneAt <= thawing);
    expect(inside.length).toBeGreaterThanOrEqual(50);
    expect(tally(inside)).toEqual({ '503 UNAVAILABLE': inside.length });
    // An order that arrives while Redis is frozen waits for its first Redis call only.
    expect(inside.filter((o) => o.doneAt - o.sentAt > 5 * REDIS_TIMEOUT_MS).map(brief)).toEqual([]);
    const books = await expectPromisesKept(pg.url, product.id, outcomes, { failedMeansNoOrder: true });
    expect(books.orders).toBe(outcomes.filter((o) => o.status === 201).length);
  });

  it('should let a buyer refused while Redis was frozen order once it answers again: the user lock the refused order may still take is released, not left to expire', async () => {
    const product = await createProduct(svc.url, { stock: 10, segments: 2 });
    redis.freeze();
    let refused: Outcome;
    try {
      // Its script waits in the frozen server's socket: Redis runs it, user lock and all, on the thaw.
      refused = await placeOrder(svc.url, 'frozen-buyer', product.id);
    } finally {
      redis.thaw();
    }
    expect(`${refused.status} ${refused.code}`).toBe('503 UNAVAILABLE');
    // Redis may still be catching up: an answer other than 503 UNAVAILABLE is the one that counts.
    const next = await waitFor('an answer from a thawed Redis', async () => {
      const o = await placeOrder(svc.url, 'frozen-buyer', product.id);
      return o.status === 503 && o.code === 'UNAVAILABLE' ? null : o;
    });
    expect(brief(next)).toMatch(/^frozen-buyer -> .*: 201 /);
    const books = await expectPromisesKept(pg.url, product.id, [refused, next], { failedMeansNoOrder: true });
    expect(books.orders).toBe(1);
  });
});
