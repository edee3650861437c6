// I8 (fair admission) under a storm, with I1-I7 kept: two service processes, 2,500 buyers joining
// a waiting room before and after the start (with duplicate joins on both processes at once), each
// polling as Retry-After paces it and ordering once admitted; some pay, some cancel, some leave the
// reservation to expire, some let their admission lapse. Then PostgreSQL and what every buyer saw
// are checked: no order without a valid admission, each ticket admitted at most once and in queue
// order, the pre-queue in the order recomputed here from the revealed seed, the outstanding
// admissions never above the ratio, and every buyer ordered, sold out or ended. Then a pause: admitted
// buyers told sold_out keep their admissions through it (the clock moved in PostgreSQL), on either
// process, and order first when units come back.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expectStockBalanced, withDb } from './support/database';
import { admin, pooled, Reply, request, ServiceProcess, shop, startedTogether, startService } from './support/service';
import {
  Buyer,
  expectAdmissionsKept,
  newBuyer,
  openSaleNow,
  Part,
  pauseLongAgo,
  pausedSince,
  recomputeLottery,
  runCrowd,
  saleState,
  saleWatch,
  sha256Hex,
  stepOf,
} from './support/waiting-room';
import { resetState } from './support/database';
import { admissionStepProblems, bucketOfPosition, promiseBreaches } from '../harness/queue-order';
import { sleep, waitFor } from './support/wait';

const UNITS = 200;
const USERS = 2500;
const PRE = 1000;
const WAVES = 6;
// Below the default (1.5) so that units coming back and admissions lapsing need further admission
// steps: with 1.5 the surplus admitted at the start absorbs them all in one batch.
const RATIO = 1;

const partOf = (i: number): Part => {
  const k = i % 20;
  if (k < 2) return 'ignore admission';
  if (k === 2) return 'cancel';
  if (k < 5) return 'leave unpaid';
  return 'pay';
};

describe('the waiting room under a storm across two service processes (I8, I1-I7)', () => {
  let a: ServiceProcess;
  let b: ServiceProcess;

  beforeAll(async () => {
    await resetState();
    const env = { ADMISSION_TICK_MS: '50', EXPIRY_SWEEP_MS: '200', ADMISSION_RATIO: String(RATIO) };
    [a, b] = await startedTogether([startService(env), startService(env)]);
  });
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
  });

  it('admits only in queue order, within the ratio, each ticket once, and sells only to admitted buyers', async () => {
    const urls = [a.url, b.url];
    // The sale opens when the pre-queue has joined (openSaleNow), however long that takes here.
    const created = await request(
      a.url,
      'POST',
      '/admin/products',
      {
        name: 'queued sale',
        stock: UNITS,
        segments: 10,
        waitingRoom: true,
        admissionTtlS: 10,
        paymentTimeoutS: 3,
        startsAt: new Date(Date.now() + 3_600_000).toISOString(),
      },
      admin,
    );
    expect(created.status).toBe(201);
    const productId: number = created.body.id;
    const before = await request(b.url, 'GET', `/products/${productId}/queue/fairness`);
    expect(before.status).toBe(200);
    expect(before.body.seed).toBeUndefined();
    expect(before.body.seedHash).toMatch(/^[0-9a-f]{64}$/);

    const buyers = Array.from({ length: USERS }, (_, i) => newBuyer(`wr-${i}`, partOf(i)));
    const joins = new Map<Buyer, Reply[]>();
    const timed = new Map<Buyer, { sentAt: number; answeredAt: number }>();
    const join = async (buyer: Buyer, url: string) => {
      const sentAt = Date.now();
      const r = await request(url, 'POST', `/products/${productId}/queue`, { userId: buyer.userId });
      if (r.status === 201) timed.set(buyer, { sentAt, answeredAt: Date.now() });
      joins.set(buyer, [...(joins.get(buyer) ?? []), r]);
      return r;
    };
    // Every fourth buyer joins on both processes at once: one ticket, made once.
    const joinTasks = (group: Buyer[], offset: number) =>
      group.flatMap((buyer, i) => {
        const tasks = [() => join(buyer, urls[(i + offset) % 2])];
        if (i % 4 === 0) tasks.push(() => join(buyer, urls[(i + offset + 1) % 2]));
        return tasks;
      });

    // Before the start: the pre-queue, every ticket without a place until the draw.
    await pooled(joinTasks(buyers.slice(0, PRE), 0), 100);
    for (const buyer of buyers.slice(0, PRE))
      expect((joins.get(buyer) ?? []).map((r) => r.body.position)).toEqual((joins.get(buyer) ?? []).map(() => null));
    // The pre-queue's count (what paces its first polls) is exact under both processes' joins, a
    // user who joined on both counted once.
    const counted = await withDb((db) =>
      db.query('SELECT sum(pre_joined)::int AS n FROM queue_counts WHERE product_id = $1', [productId]),
    );
    expect(counted.rows).toEqual([{ n: PRE }]);
    await openSaleNow(urls, productId, joins.get(buyers[0])![0].body.id);
    // After it: waves of arrivals, each sent once the one before was answered.
    const waves: Buyer[][] = [];
    const perWave = (USERS - PRE) / WAVES;
    for (let w = 0; w < WAVES; w++) {
      const wave = buyers.slice(PRE + w * perWave, PRE + (w + 1) * perWave);
      waves.push(wave);
      await pooled(joinTasks(wave, w), 100);
    }

    // Each user: one ticket, made once (one 201), whichever process answered.
    for (const buyer of buyers) {
      const replies = joins.get(buyer) ?? [];
      expect(replies.map((r) => r.status).filter((s) => s !== 200 && s !== 201)).toEqual([]);
      expect(replies.filter((r) => r.status === 201)).toHaveLength(1);
      expect(new Set(replies.map((r) => r.body.lotteryId)).size).toBe(1);
      buyer.ticketId = replies[0].body.id;
      buyer.lotteryId = replies[0].body.lotteryId;
    }

    // The sale runs until every unit is paid for and the crowd has had its answers.
    const settling = saleWatch(() => saleState(productId, withDb));
    const watching = settling.watch();
    await runCrowd({
      urls,
      productId,
      buyers,
      inFlight: 48,
      finished: settling.settled,
    });
    await watching;
    // Past the sold-out staleness bound, each buyer's last answer.
    await sleep(500);
    await pooled(
      buyers.map((buyer, i) => async () => {
        const r = await request(urls[i % 2], 'GET', `/products/${productId}/queue/${buyer.ticketId}`);
        expect(r.status).toBe(200);
        buyer.last = r;
        buyer.position = r.body.position;
      }),
      64,
    );

    // The lottery: the seed revealed after the start is the one committed before it, and the pre-queue's
    // positions are its order, recomputed here from the seed and the ticket ids.
    const after = await request(a.url, 'GET', `/products/${productId}/queue/fairness`);
    expect(after.body.seedHash).toBe(before.body.seedHash);
    expect(sha256Hex(Buffer.from(after.body.seed, 'hex'))).toBe(before.body.seedHash);
    expect(after.body.preQueue).toBe(PRE);
    const pre = buyers.slice(0, PRE);
    const byPosition = [...pre].sort((x, y) => (x.position as number) - (y.position as number));
    expect(byPosition.map((x) => x.position)).toEqual(Array.from({ length: PRE }, (_, i) => i + 1));
    expect(byPosition.map((x) => x.lotteryId)).toEqual(
      recomputeLottery(
        after.body.seed,
        pre.map((x) => x.lotteryId!),
      ),
    );
    // Arrivals after the pre-queue, bucket by bucket: a join answered before another was sent is never
    // placed behind it unless both fell in the same bucket (the draws say which bucket holds a place).
    const positions = buyers.map((x) => x.position as number);
    expect([...positions].sort((x, y) => x - y)).toEqual(Array.from({ length: USERS }, (_, i) => i + 1));
    for (const wave of waves) expect(Math.min(...wave.map((x) => x.position as number))).toBeGreaterThan(PRE);
    const bucketOf = bucketOfPosition((await request(a.url, 'GET', `/products/${productId}/queue/draws`)).body.draws);
    const arrivals = waves.flat().map((x) => ({ ...timed.get(x)!, position: x.position as number }));
    expect(promiseBreaches(arrivals, bucketOf)).toEqual([]);

    // I8 in PostgreSQL: in queue order, within the ratio, each position once, every order admitted.
    const { batches, orders } = await expectAdmissionsKept(productId, RATIO, buyers, withDb);
    expect(batches.length).toBeGreaterThan(1);

    // Every buyer ends ordered, sold out, or ended because an admission lapsed unspent.
    const admittedThrough = batches[batches.length - 1].last;
    const spent = new Set(orders.map((o) => o.position));
    for (const buyer of buyers) {
      const status = buyer.last!.body.status;
      if (status === 'ordered') expect(spent.has(buyer.position as number)).toBe(true);
      else if (status === 'ended') {
        expect(buyer.position as number).toBeLessThanOrEqual(admittedThrough);
        expect(spent.has(buyer.position as number)).toBe(false);
      } else expect(status).toBe('sold_out');
    }
    // The storm did what it says: admissions lapsed, reservations expired, cancels returned units.
    expect(buyers.filter((x) => x.part === 'ignore admission' && x.seen.includes('admitted')).length).toBeGreaterThan(
      0,
    );
    expect(buyers.filter((x) => x.part === 'ignore admission' && x.orderId !== undefined)).toEqual([]);
    expect(orders.filter((o) => o.status === 'expired').length).toBeGreaterThan(0);
    expect(orders.filter((o) => o.status === 'cancelled').length).toBeGreaterThan(0);

    // I1, I2 and I7 from the database.
    await expectStockBalanced(productId, UNITS);
    const paid = new Set(orders.filter((o) => o.status === 'paid').map((o) => o.id));
    expect(paid).toEqual(new Set(buyers.filter((x) => x.paid).map((x) => x.orderId)));
    expect(paid.size).toBe(UNITS);
    for (const x of buyers.filter((y) => y.cancelled))
      expect(orders.find((o) => o.id === x.orderId)?.status).toBe('cancelled');
    // No 5xx to any buyer's order.
    expect(buyers.flatMap((x) => x.orderReplies).filter((r) => r.status >= 500)).toEqual([]);

    // The verifier a buyer runs, with their ticket, on either process: every draw checks, and so does
    // their place. A ticket moved to another bucket in PostgreSQL shows as a mismatch.
    const buyer = waves[2][7];
    const verified = await verifyQueue(b.url, productId, buyer.ticketId);
    expect({ code: verified.code, out: verified.stdout }).toEqual({
      code: 0,
      out: expect.stringContaining(`your ticket ${buyer.lotteryId}: position ${buyer.position}, in the bucket of`),
    });
    expect(verified.stdout).toContain('OK: every draw is the one its committed seed makes');
    await withDb((db) =>
      db.query(
        `UPDATE queue_tickets SET bucket = (SELECT max(bucket) FROM queue_tickets WHERE product_id = $1)
          WHERE product_id = $1 AND user_id = $2`,
        [productId, waves[0][0].userId],
      ),
    );
    const tampered = await verifyQueue(a.url, productId);
    expect({ code: tampered.code, out: tampered.stdout }).toEqual({
      code: 1,
      out: expect.stringContaining('MISMATCH'),
    });
  }, 480_000);

  it('holds the admissions of buyers told sold_out through a pause, whichever process they poll, and they order first when units come back', async () => {
    const units = 40;
    const created = await request(
      a.url,
      'POST',
      '/admin/products',
      { name: 'paused room', stock: units, segments: 4, limitPerUser: 2, waitingRoom: true, admissionTtlS: 30 },
      admin,
    );
    expect(created.status).toBe(201);
    const productId: number = created.body.id;
    const urls = [a.url, b.url];
    const on = (i: number) => urls[i % 2];
    /** Polls a ticket on a process until it has its place and its status is one of `statuses` (30 s at most: only a fault takes that long). */
    const until = (i: number, ticket: string, ...statuses: string[]): Promise<Reply> => {
      let n = 0;
      return waitFor(
        `the ticket of buyer ${i} to become ${statuses.join(' or ')}`,
        async () => {
          const r = await request(on(i + n++), 'GET', `/products/${productId}/queue/${ticket}`);
          return r.status === 200 && statuses.includes(r.body.status) && r.body.position !== null ? r : null;
        },
        30_000,
        100,
      );
    };
    // 100 buyers join on both processes at once; ratio 1: the first 40 places are admitted.
    const tickets = await Promise.all(
      Array.from({ length: 100 }, async (_, i) => {
        const r = await request(on(i), 'POST', `/products/${productId}/queue`, { userId: `held-${i}` });
        expect(r.status).toBe(201);
        const placed = await until(i, r.body.id, 'waiting', 'admitted');
        return { i, userId: `held-${i}`, id: r.body.id as string, position: placed.body.position as number };
      }),
    );
    const admitted = tickets.filter((t) => t.position <= units);
    const [takers, held] = [admitted.slice(0, units / 2), admitted.slice(units / 2)];
    // Half the admitted take two units each, on both processes at once: nothing is left for the rest.
    const orders = await Promise.all(
      takers.map(async (t) => {
        const admission = (await until(t.i, t.id, 'admitted')).body.admission;
        const r = await request(on(t.i + 1), 'POST', '/orders', {
          userId: t.userId,
          productId,
          quantity: 2,
          admission,
        });
        expect(r.status).toBe(201);
        return { ...t, orderId: r.body.id as number };
      }),
    );
    for (const t of held) expect((await until(t.i, t.id, 'sold_out')).body.position).toBe(t.position);
    // One of the processes pauses the room; then the spec moves the clock: by it, every held
    // admission ran out during the pause.
    await waitForRoom(productId, (paused) => paused !== null);
    await pauseLongAgo(productId);
    await sleep(200); // longer than a tick: every process reads the room again
    const whilePaused = await Promise.all(
      held.map((t) => request(on(t.i + 1), 'GET', `/products/${productId}/queue/${t.id}`)),
    );
    expect(whilePaused.map((r) => r.body.status)).toEqual(held.map(() => 'sold_out'));
    // The takers cancel on both processes at once: 40 units back. Each held buyer is admitted
    // again, with the 20 s it had left, and orders; the places behind get only what is left over.
    await Promise.all(
      orders.map(async (o) => {
        const r = await request(on(o.i), 'POST', `/orders/${o.orderId}/cancel`, { userId: o.userId }, shop);
        expect(r.status).toBe(200);
      }),
    );
    const heldOrders = await Promise.all(
      held.map(async (t) => {
        const back = await until(t.i + 1, t.id, 'admitted', 'ended');
        expect(back.body).toMatchObject({ status: 'admitted', position: t.position });
        return request(on(t.i), 'POST', '/orders', { userId: t.userId, productId, admission: back.body.admission });
      }),
    );
    expect(heldOrders.map((r) => r.status)).toEqual(held.map(() => 201));
    await waitForRoom(productId, (paused) => paused === null);
    // In PostgreSQL: every held position spent by its own buyer, batches contiguous and within the ratio, I1.
    await withDb(async (db) => {
      const spent = await db.query(
        `SELECT user_id, admission_position::int AS position FROM orders WHERE product_id = $1 AND status = 'reserved'`,
        [productId],
      );
      expect(spent.rows.sort((x, y) => x.position - y.position)).toEqual(
        held.map((t) => ({ user_id: t.userId, position: t.position })).sort((x, y) => x.position - y.position),
      );
      const batches = await db.query(
        `SELECT first_position::int AS first, last_position::int AS last, admitted_at, units_left, outstanding_before
           FROM admission_batches WHERE product_id = $1 ORDER BY first_position`,
        [productId],
      );
      expect(admissionStepProblems(batches.rows.map(stepOf), RATIO)).toEqual([]);
    });
    await expectStockBalanced(productId, units);
  }, 120_000);
});

/** `npm run verify-queue` as a buyer runs it (the built command): its exit code and what it printed. */
async function verifyQueue(url: string, productId: number, ticket?: string) {
  const args = ['dist/src/cli/verify-queue.js', url, String(productId), ...(ticket ? [ticket] : [])];
  return promisify(execFile)(process.execPath, args, { cwd: join(__dirname, '..') }).then(
    ({ stdout }) => ({ code: 0, stdout }),
    (err: { code: number; stdout: string }) => ({ code: err.code, stdout: err.stdout }),
  );
}

/** Waits until the room's pause mark satisfies `holds` (30 s at most: only a fault takes that long). */
async function waitForRoom(productId: number, holds: (pausedSince: Date | null) => boolean): Promise<void> {
  await waitFor(
    `the room of product ${productId} to reach the state waited for`,
    async () => holds(await pausedSince(productId)),
    30_000,
    100,
  );
}
