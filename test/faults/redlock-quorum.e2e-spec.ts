// Fault: Redlock over three independent Redis masters loses one master, then two. With one down
// (here the one that also carries the hints and user locks) a quorum of two still stands: orders
// go on, readiness stays green and reports the lost master, and no order is told UNAVAILABLE.
// With two masters left every split vote (one buyer on each) fails for both, so on a busy machine
// a contended segment may stay unobtainable for the whole LOCK_WAIT_MS: such an order gets 503
// BUSY, which means nothing happened. With two down no lock can be had: orders fail fast with
// 503 UNAVAILABLE and nothing is sold twice. When they are back, orders resume (with BUSY, again,
// for what a busy machine cannot serve within LOCK_WAIT_MS). A frozen master (or a live one too
// slow for REDIS_TIMEOUT_MS) is not a lost one: the vote is retried.
import { join } from 'node:path';
import { createProduct, pooled, request, ServiceProcess, startedTogether } from '../support/service';
import {
  brief,
  expectPromisesKept,
  FaultPostgres,
  FaultRedis,
  Outcome,
  placeOrder,
  scratchDir,
  startFaultService,
  stopAll,
  tally,
} from './support';
import { waitFor } from '../support/wait';

const REDIS_TIMEOUT_MS = 300;
const LOCK_WAIT_MS = 2000;
/** The lock wait, then a few Redis timeouts (doubled by auto-pipelining), plus slack. */
const REPLY_BOUND_MS = LOCK_WAIT_MS + 6 * REDIS_TIMEOUT_MS + 1500;

describe('Redlock quorum over three Redis masters, across two service processes', () => {
  const scratch = scratchDir('redlock-quorum');
  let pg: FaultPostgres;
  let masters: FaultRedis[];
  let a: ServiceProcess;
  let b: ServiceProcess;

  beforeAll(async () => {
    [pg, ...masters] = await Promise.all([
      FaultPostgres.start(join(scratch.dir, 'pg')),
      FaultRedis.start(),
      FaultRedis.start(),
      FaultRedis.start(),
    ]);
    const env = {
      REDIS_LOCK_URLS: masters.map((m) => m.url).join(','),
      REDIS_TIMEOUT_MS: String(REDIS_TIMEOUT_MS),
      LOCK_WAIT_MS: String(LOCK_WAIT_MS),
      LOG_LEVEL: 'error',
    };
    // REDIS_URL (hints, user locks) is master 0: losing it must not stop the sale either.
    [a, b] = await startedTogether([startFaultService(pg, masters[0], env), startFaultService(pg, masters[0], env)]);
  });
  afterAll(async () => {
    await stopAll(
      () => a?.stop(),
      () => b?.stop(),
      ...(masters ?? []).map((m) => () => m.stop()),
      () => pg?.stop(),
    );
    scratch.cleanup();
  });

  /** Every buyer sends two orders at once, one to each process. */
  async function storm(productId: number, buyers: string[]): Promise<Outcome[]> {
    const tasks = buyers.flatMap((u) => [() => placeOrder(a.url, u, productId), () => placeOrder(b.url, u, productId)]);
    return pooled(tasks, 40);
  }
  const health = async () => request(a.url, 'GET', '/health');
  /**
   * What a live quorum promises on a busy machine: no UNAVAILABLE, no 500, no hang. A segment
   * contended past LOCK_WAIT_MS gives 503 BUSY (nothing happened), never sooner.
   */
  function expectQuorumServed(outcomes: Outcome[]): void {
    expect(outcomes.filter((o) => o.status === 0 || (o.status >= 500 && o.code !== 'BUSY')).map(brief)).toEqual([]);
    expect(outcomes.filter((o) => o.code === 'BUSY' && o.doneAt - o.sentAt < LOCK_WAIT_MS).map(brief)).toEqual([]);
  }

  it('should report every lock master in readiness', async () => {
    const h = await health();
    expect(h.status).toBe(200);
    expect(h.body.details.redis).toMatchObject({ status: 'up', hints: 'up', lockMasters: ['up', 'up', 'up'] });
  });

  it('should keep selling exactly the stock, once per user, with one master of three down', async () => {
    const product = await createProduct(a.url, { stock: 100, segments: 5 });
    await masters[0].stop();
    const h = await health();
    expect(h.status).toBe(200);
    expect(h.body.details.redis).toMatchObject({ status: 'up', hints: 'down', lockMasters: ['down', 'up', 'up'] });

    const outcomes = await storm(
      product.id,
      Array.from({ length: 150 }, (_, i) => `one-down-${i}`),
    );
    expectQuorumServed(outcomes);
    const sold = outcomes.filter((o) => o.status === 201).length;
    expect(sold).toBeGreaterThanOrEqual(50);
    const books = await expectPromisesKept(pg.url, product.id, outcomes, { failedMeansNoOrder: true });
    // Every unit sold was answered 201, and every unit is either sold or still there.
    expect(books).toMatchObject({ totalStock: 100, ordered: sold, orders: sold, remaining: 100 - sold });
  });

  it('should answer 503 UNAVAILABLE, bounded by the Redis timeouts, with two masters of three down, sell nothing, and resume when they are back', async () => {
    const product = await createProduct(a.url, { stock: 100, segments: 5 });
    await masters[1].stop();
    const h = await health();
    expect(h.status).toBe(503);
    expect(h.body.details.redis).toMatchObject({ status: 'down', lockMasters: ['down', 'down', 'up'] });

    const down = await storm(
      product.id,
      Array.from({ length: 50 }, (_, i) => `two-down-${i}`),
    );
    expect(tally(down)).toEqual({ '503 UNAVAILABLE': 100 });
    // A lost quorum is not waited out: each order fails on its first vote, bounded by the Redis
    // timeouts (the slack is for a 2-core machine under load, where every step is slower).
    expect(
      down.filter((o) => o.retryAfter !== '1' || o.doneAt - o.sentAt > 3 * REDIS_TIMEOUT_MS + 2500).map(brief),
    ).toEqual([]);
    expect((await expectPromisesKept(pg.url, product.id, down, { failedMeansNoOrder: true })).orders).toBe(0);

    await Promise.all([masters[0].start(), masters[1].start()]);
    // The clients reconnect by themselves (backing off to one attempt a second), in each process:
    // the storm below goes to both, so both must be ready (a CI run that waited for a alone saw b
    // answer every order 503 UNAVAILABLE, its clients not yet back).
    const ready = async (svc: ServiceProcess) => {
      const h = await request(svc.url, 'GET', '/health');
      return (
        h.status === 200 &&
        h.body.details.redis.hints === 'up' &&
        h.body.details.redis.lockMasters.every((m: string) => m === 'up')
      );
    };
    await waitFor(
      () => 'readiness of both processes with every master back',
      async () => (await ready(a)) && (await ready(b)),
    );
    const back = await storm(
      product.id,
      Array.from({ length: 50 }, (_, i) => `back-${i}`),
    );
    expectQuorumServed(back);
    const sold = back.filter((o) => o.status === 201).length;
    expect(sold).toBeGreaterThanOrEqual(25);
    const books = await expectPromisesKept(pg.url, product.id, [...down, ...back], { failedMeansNoOrder: true });
    expect(books).toMatchObject({ totalStock: 100, remaining: 100 - sold, ordered: sold, orders: sold });
  });

  it('should keep selling, bounded by the timeouts, with one master of three frozen and segments contended', async () => {
    // Frozen is worse than down: a master that does not answer turns a split vote (two buyers, one
    // master each) into a wait for its command timeout, so contended segments slow down and some
    // orders give up with BUSY after LOCK_WAIT_MS. On a busy machine a live master may miss the
    // timeout too; that vote is retried, not taken for a lost quorum: never UNAVAILABLE here.
    // Never a 500, never a hang, nothing oversold.
    const product = await createProduct(a.url, { stock: 150, segments: 2 });
    masters[2].freeze();
    const outcomes = await storm(
      product.id,
      Array.from({ length: 200 }, (_, i) => `frozen-${i}`),
    ).finally(() => masters[2].thaw());
    expectQuorumServed(outcomes);
    expect(outcomes.filter((o) => o.doneAt - o.sentAt > REPLY_BOUND_MS).map(brief)).toEqual([]);
    expect(outcomes.filter((o) => o.status === 201).length).toBeGreaterThanOrEqual(50);
    await expectPromisesKept(pg.url, product.id, outcomes, { failedMeansNoOrder: true });
  });
});
