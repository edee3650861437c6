// Fault: Redis loses the waiting room's queue in the middle of a sale (FLUSHALL, then a restart of
// a Redis without persistence), with two service processes and a crowd polling. What
// docs/waiting-room.md says happens: the queue is made again for a new epoch whose positions count
// on from the admission cursor; buyers whose tickets were lost are told 404 TICKET_NOT_FOUND and
// join again at the back; admissions already made stay valid; nothing is oversold, no position is
// admitted to two users, and no order is placed without an admission.
import { join } from 'node:path';
import { admin, request, ServiceProcess } from '../support/service';
import { expectAdmissionsKept, newBuyer, runCrowd, saleState, saleWatch } from '../support/waiting-room';
import {
  audit,
  FaultPostgres,
  FaultRedis,
  scratchDir,
  sleep,
  startFaultService,
  stopAll,
  waitFor,
  withPg,
} from './support';

const UNITS = 80;
const USERS = 400;

describe('the waiting room when Redis is flushed and restarted empty mid-queue, across two service processes', () => {
  const scratch = scratchDir('waiting-room-redis');
  let pg: FaultPostgres;
  let redis: FaultRedis;
  let a: ServiceProcess;
  let b: ServiceProcess;

  beforeAll(async () => {
    [pg, redis] = await Promise.all([FaultPostgres.start(join(scratch.dir, 'pg')), FaultRedis.start()]);
    const env = { ADMISSION_TICK_MS: '50', ADMISSION_RATIO: '1', QUEUE_SHARDS: '4', LOG_LEVEL: 'error' };
    [a, b] = await Promise.all([startFaultService(pg, redis, env), startFaultService(pg, redis, env)]);
  });
  afterAll(async () => {
    await stopAll(
      () => a?.stop(),
      () => b?.stop(),
      () => redis?.stop(),
      () => pg?.stop(),
    );
    scratch.cleanup();
  });

  it('makes the queue again from the admission cursor: lost tickets rejoin at the back, nobody is admitted twice or sold to unadmitted', async () => {
    const urls = [a.url, b.url];
    const startsAt = Date.now() + 3000;
    const created = await request(
      a.url,
      'POST',
      '/admin/products',
      {
        name: 'queued sale, Redis lost',
        stock: UNITS,
        segments: 4,
        waitingRoom: true,
        admissionTtlS: 10,
        startsAt: new Date(startsAt).toISOString(),
      },
      admin,
    );
    expect(created.status).toBe(201);
    const productId: number = created.body.id;
    const buyers = Array.from({ length: USERS }, (_, i) => newBuyer(`lost-${i}`, 'pay'));
    // Half join before the start (the pre-queue), half after it.
    const joinAll = (group: typeof buyers) =>
      Promise.all(
        group.map(async (buyer, i) => {
          const r = await request(urls[i % 2], 'POST', `/products/${productId}/queue`, { userId: buyer.userId });
          expect(r.status).toBe(201);
          buyer.ticketId = r.body.id;
        }),
      );
    await joinAll(buyers.slice(0, USERS / 2));
    while (Date.now() < startsAt + 100) await sleep(50);
    await joinAll(buyers.slice(USERS / 2));

    const sold = () => saleState(productId, (work) => withPg(pg.url, work));
    const settling = saleWatch(sold, Date.now() + 150_000);
    const crowd = runCrowd({
      urls,
      productId,
      buyers,
      inFlight: 32,
      rejoinWhenLost: true,
      finished: settling.settled,
      deadline: Date.now() + 120_000,
    });
    // Mid-queue: a third of the units sold, most buyers still waiting.
    await waitFor('a third of the units ordered', async () => (await sold()).orders >= UNITS / 3, 60_000);
    const before = await withPg(pg.url, async (db) => (await db.query('SELECT * FROM waiting_rooms')).rows[0]);
    await redis.with((r) => r.flushall());
    await redis.stop();
    await redis.start();
    const watching = settling.watch();
    await crowd;
    await watching;

    // A new epoch, counting on from the admission cursor of the moment it was made.
    const after = await withPg(pg.url, async (db) => (await db.query('SELECT * FROM waiting_rooms')).rows[0]);
    expect(after.epoch).toBeGreaterThan(before.epoch);
    expect(Number(after.position_base)).toBeGreaterThanOrEqual(Number(before.admitted_through));
    // Buyers were told their tickets were lost, and joined again.
    expect(buyers.filter((x) => x.rejoined > 0).length).toBeGreaterThan(0);
    // Nothing else than 200, 404 (lost: join again) and 503 with Retry-After while Redis was away.
    const kinds = new Set(buyers.flatMap((x) => [...x.refusals.keys()]));
    for (const k of kinds) expect(['404 TICKET_NOT_FOUND', '503 UNAVAILABLE', 'transport']).toContain(k);
    expect(kinds.has('transport')).toBe(false);
    // I8 and I1 in PostgreSQL.
    const { orders } = await expectAdmissionsKept(productId, 1, buyers, (work) => withPg(pg.url, work));
    expect(orders.filter((o) => o.status === 'paid')).toHaveLength(UNITS);
    const books = await audit(pg.url, productId);
    expect({ remaining: books.remaining, ordered: books.ordered, negative: books.negativeSegments }).toEqual({
      remaining: 0,
      ordered: UNITS,
      negative: 0,
    });
    expect(books.duplicateUsers).toBe(0);
  }, 240_000);
});
