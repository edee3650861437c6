// Fault: Redis is flushed (FLUSHALL), and later restarted without persistence, in the middle of a
// queued sale, with two service processes, a crowd polling and more buyers joining meanwhile. What
// docs/waiting-room.md promises: the queue lives in PostgreSQL and each buyer carries a signed
// ticket, so no Redis loss changes a place or tells anyone to join again; every position is handed
// out once, with no gap; admissions stay in queue order, within the ratio; nothing is oversold and
// no order is placed without an admission.
import { join } from 'node:path';
import { admin, request, startedTogether } from '../support/service';
import {
  Buyer,
  expectAdmissionsKept,
  newBuyer,
  openSaleNow,
  runCrowd,
  saleState,
  saleWatch,
} from '../support/waiting-room';
import { audit, FaultPostgres, FaultRedis, scratchDir, startFaultService, stopAll, withPg } from './support';
import { sleep, waitFor } from '../support/wait';
import type { ServiceProcess } from '../support/service';

const UNITS = 80;
const USERS = 450;

describe('the waiting room when Redis is flushed, then restarted empty, mid-queue, across two service processes', () => {
  const scratch = scratchDir('waiting-room-redis');
  let pg: FaultPostgres;
  let redis: FaultRedis;
  let a: ServiceProcess;
  let b: ServiceProcess;

  beforeAll(async () => {
    [pg, redis] = await Promise.all([FaultPostgres.start(join(scratch.dir, 'pg')), FaultRedis.start()]);
    const env = { ADMISSION_TICK_MS: '50', ADMISSION_RATIO: '1', LOG_LEVEL: 'error' };
    [a, b] = await startedTogether([startFaultService(pg, redis, env), startFaultService(pg, redis, env)]);
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

  it('keeps every place through both losses: no rejoin, no position twice, no gap, admissions in order', async () => {
    const urls = [a.url, b.url];
    // The sale opens once the pre-queue has joined (openSaleNow), however long that takes here.
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
        startsAt: new Date(Date.now() + 3_600_000).toISOString(),
      },
      admin,
    );
    expect(created.status).toBe(201);
    const productId: number = created.body.id;
    const buyers = Array.from({ length: USERS }, (_, i) => newBuyer(`lost-${i}`, 'pay'));
    const first = new Map<Buyer, number | null>();
    const joinAll = (group: Buyer[]) =>
      Promise.all(
        group.map(async (buyer, i) => {
          const r = await request(urls[i % 2], 'POST', `/products/${productId}/queue`, { userId: buyer.userId });
          expect(r.status).toBe(201);
          buyer.ticketId = r.body.id;
          first.set(buyer, r.body.position);
        }),
      );
    // A third join before the start (the pre-queue), a third after it, a third after the flush.
    await joinAll(buyers.slice(0, USERS / 3));
    expect(buyers.slice(0, USERS / 3).filter((buyer) => first.get(buyer) !== null)).toEqual([]);
    await openSaleNow(urls, productId, buyers[0].ticketId!);
    await joinAll(buyers.slice(USERS / 3, (2 * USERS) / 3));

    const sold = () => saleState(productId, (work) => withPg(pg.url, work));
    const settling = saleWatch(sold);
    const crowd = runCrowd({
      urls,
      productId,
      buyers: buyers.slice(0, (2 * USERS) / 3),
      inFlight: 32,
      finished: settling.settled,
    });
    // Mid-queue: a few units sold, most buyers still waiting. First the flush, with joins right after it.
    await waitFor('some units ordered', async () => (await sold()).orders >= UNITS / 5, 60_000);
    await redis.with((r) => r.flushall());
    const late = buyers.slice((2 * USERS) / 3);
    await joinAll(late);
    const lateCrowd = runCrowd({
      urls,
      productId,
      buyers: late,
      inFlight: 8,
      finished: settling.settled,
    });
    // Then a restart without persistence, while the crowd polls and orders.
    await waitFor('more units ordered', async () => (await sold()).orders >= UNITS / 2, 60_000);
    await redis.stop();
    await sleep(500);
    await redis.start();
    const watching = settling.watch();
    await Promise.all([crowd, lateCrowd]);
    await watching;

    // Every buyer joins again (as a reload would): the same place, answered 200.
    const again = await Promise.all(
      buyers.map((buyer, i) => request(urls[i % 2], 'POST', `/products/${productId}/queue`, { userId: buyer.userId })),
    );
    expect(again.filter((r) => r.status !== 200).map((r) => r.status)).toEqual([]);
    // No place changed: each buyer saw one position, the one the join (or, for the pre-queue, the draw) gave.
    buyers.forEach((buyer, i) => {
      const seen = new Set([...buyer.positions, again[i].body.position as number]);
      if (first.get(buyer) !== null) seen.add(first.get(buyer) as number);
      expect({ user: buyer.userId, positions: [...seen] }).toEqual({
        user: buyer.userId,
        positions: [again[i].body.position],
      });
    });
    // No position twice, and none left a gap: 1..USERS, each held by one buyer, as PostgreSQL has it too.
    const positions = again.map((r) => r.body.position as number).sort((x, y) => x - y);
    expect(positions).toEqual(Array.from({ length: USERS }, (_, i) => i + 1));
    const rows = await withPg(pg.url, async (db) =>
      (await db.query('SELECT user_id, position::int AS position FROM queue_places($1)', [productId])).rows.map(
        (r: { user_id: string; position: number }): [string, number] => [r.user_id, r.position],
      ),
    );
    expect(new Map(rows)).toEqual(new Map(buyers.map((x, i) => [x.userId, again[i].body.position])));
    // Nobody was told to join again; while Redis was away an order may have been 503 (it is retried).
    const kinds = new Set(buyers.flatMap((x) => [...x.refusals.keys()]));
    expect([...kinds]).toEqual([]);
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
  }, 480_000);
});
