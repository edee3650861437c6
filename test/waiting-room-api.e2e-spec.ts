// The waiting room's HTTP contract, call by call, in-process against the real PostgreSQL and Redis:
// joining (once per user and product), polling (Retry-After), being admitted and ordering with the
// admission, sold out and back, the lottery's record, and every hostile admission refused with 403
// and nothing changed.
import { createHmac } from 'node:crypto';
import { createSigner } from 'fast-jwt';
import { redisCommandCount, resetState, statementCalls, callsBetween, withDb } from './support/database';
import { CLOCK } from '../src/waiting-room/waiting-room.repository';
import { InProcessService, startInProcess } from './support/in-process';
import { sleep, waitFor } from './support/wait';
import { pauseLongAgo, pausedSince } from './support/waiting-room';
import { admin, Reply, shop } from './support/service';

const SECRET = 'admission-secret-for-the-specs-0123456789';
const BUYER_SECRET = 'buyer-secret-for-the-specs-0123456789abcdef';
const env = { ADMISSION_SECRET: SECRET, ADMISSION_TICK_MS: '20', ADMISSION_RATIO: '1' };
const sign = createSigner({ key: Buffer.from(SECRET), algorithm: 'HS256', noTimestamp: true });
const buyerToken = (sub: string) =>
  createSigner({ key: Buffer.from(BUYER_SECRET), algorithm: 'HS256', expiresIn: 60_000 })({ sub });

function expectError(res: Reply, status: number, code: string): void {
  expect({ status: res.status, code: res.body?.code }).toEqual({ status, code });
  expect(res.body).toEqual({ statusCode: status, code, message: expect.any(String) });
}

async function snapshot() {
  return withDb(async (db) => ({
    segments: (await db.query('SELECT product_id, idx, stock FROM stock_segments ORDER BY product_id, idx')).rows,
    orders: (await db.query('SELECT id, product_id, user_id, status, admission_position FROM orders ORDER BY id')).rows,
    batches: (await db.query('SELECT product_id, first_position, last_position FROM admission_batches ORDER BY 1, 2'))
      .rows,
  }));
}

describe('the waiting room, call by call', () => {
  let svc: InProcessService;
  const send = (...args: Parameters<InProcessService['request']>) => svc.request(...args);

  beforeAll(async () => {
    await resetState();
    svc = await startInProcess(env);
  });
  afterAll(() => svc?.close());

  const product = async (body: Record<string, unknown>) => {
    const r = await send('POST', '/admin/products', { name: 'queued', segments: 2, ...body }, admin);
    if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}\n${svc.output()}`);
    return r.body.id as number;
  };
  const join = (productId: number, userId: string) => send('POST', `/products/${productId}/queue`, { userId });
  const poll = (productId: number, ticketId: string) => send('GET', `/products/${productId}/queue/${ticketId}`);
  /** Polls until the ticket's status is one of `statuses` and it has a position (the admitter ticks every 20 ms). */
  const pollUntil = (productId: number, ticketId: string, ...statuses: string[]) =>
    waitFor(
      () => `ticket ${ticketId} to become ${statuses.join(' or ')}\n${svc.output()}`,
      async () => {
        const r = await poll(productId, ticketId);
        return statuses.includes(r.body.status) && r.body.position !== null ? r : null;
      },
      30_000,
      20,
    );

  it('gives one ticket per user and product (201, then 200 with the same ticket), paced by Retry-After', async () => {
    const id = await product({ stock: 5, waitingRoom: true });
    const first = await join(id, 'ann');
    expect(first.status).toBe(201);
    // The sale is open: the position comes with its bucket's draw, just after the bucket ends, and
    // never changes after. Until then the answer says to poll at once: that poll waits for the draw.
    expect(first.body).toMatchObject({
      id: expect.any(String),
      lotteryId: expect.stringMatching(/^[0-9a-f]{24}$/),
      productId: id,
      userId: 'ann',
      status: 'waiting',
      position: null,
    });
    expect(first.headers['retry-after']).toBe('0');
    const placed = await pollUntil(id, first.body.id, 'waiting', 'admitted');
    expect(placed.body).toEqual({
      id: first.body.id,
      lotteryId: first.body.lotteryId,
      productId: id,
      userId: 'ann',
      status: expect.stringMatching(/^(waiting|admitted)$/),
      position: 1,
      ahead: expect.any(Number),
      // Waiting, it is within the next admission step's reach (5 units, ratio 1): one tick, in whole seconds.
      estimatedWaitS: placed.body.status === 'admitted' ? 0 : 1,
      ...(placed.body.status === 'admitted'
        ? { admission: expect.any(String), admissionExpiresAt: expect.any(String) }
        : {}),
    });
    expect(Number(placed.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    const again = await join(id, 'ann');
    expect(again.status).toBe(200);
    // The same ticket: its lottery id and place (the token now carries the place the draw gave it).
    expect(again.body).toMatchObject({ lotteryId: first.body.lotteryId, position: 1 });
    expect((await poll(id, again.body.id)).body.position).toBe(1);
  });

  it("answers 404 TICKET_NOT_FOUND to every hostile ticket (forged, raised, expired, another product's) and changes nothing", async () => {
    const id = await product({ stock: 2, waitingRoom: true });
    const other = await product({ stock: 2, waitingRoom: true });
    for (const u of ['ula', 'val', 'wyn']) expect((await join(id, u)).status).toBe(201);
    const wyn = (await pollUntil(id, (await join(id, 'wyn')).body.id, 'waiting', 'admitted')).body;
    // Let the admission settle (ratio 1, 2 units: positions 1 and 2), so that only the calls could change anything.
    await waitFor('positions 1 and 2 admitted', async () => {
      const [room] = await withDb(
        async (db) => (await db.query('SELECT admitted_through FROM waiting_rooms WHERE product_id = $1', [id])).rows,
      );
      return Number(room.admitted_through) === 2;
    });
    const before = await snapshot();
    const tickets = await withDb(async (db) => (await db.query('SELECT * FROM queue_tickets ORDER BY 1, 2')).rows);
    // The ticket key is derived from the admission key (see src/admissions/admissions.service.ts).
    const ticketKey = createHmac('sha256', Buffer.from(SECRET)).update('queue-ticket').digest();
    const signTicket = createSigner({ key: ticketKey, algorithm: 'HS256', noTimestamp: true });
    const [h, payload, sig] = (wyn.id as string).split('.');
    const raised = Buffer.from(
      JSON.stringify({ ...JSON.parse(Buffer.from(payload, 'base64url').toString()), pos: 1 }),
    ).toString('base64url');
    const hostile = {
      forged: signTicket({ sub: 'wyn', pid: id, pos: 1, exp: 9_999_999_999 }).replace(/.{4}$/, 'AAAA'),
      raised: `${h}.${raised}.${sig}`,
      garbage: 'not-a-ticket',
      expired: signTicket({ sub: 'wyn', pid: id, pos: wyn.position, exp: Math.floor(Date.now() / 1000) - 1 }),
      wrongKey: createSigner({ key: Buffer.from('x'.repeat(40)), algorithm: 'HS256', noTimestamp: true })({
        sub: 'wyn',
        pid: id,
        pos: 1,
        exp: 9_999_999_999,
      }),
    };
    for (const [name, t] of Object.entries(hostile)) {
      const r = await poll(id, t);
      expect({ name, status: r.status, code: r.body.code }).toEqual({ name, status: 404, code: 'TICKET_NOT_FOUND' });
    }
    expect((await poll(id, hostile.expired)).body.message).toMatch(/expired/);
    // Another product's ticket, and a good ticket of this product read under another.
    expectError(await poll(other, wyn.id), 404, 'TICKET_NOT_FOUND');
    expect((await poll(id, wyn.id)).body.position).toBe(wyn.position);
    expect(await snapshot()).toEqual(before);
    expect(await withDb(async (db) => (await db.query('SELECT * FROM queue_tickets ORDER BY 1, 2')).rows)).toEqual(
      tickets,
    );
  });

  it('admits, lets the admitted buyer order once with the admission, and then says ordered', async () => {
    const id = await product({ stock: 3, waitingRoom: true, admissionTtlS: 30 });
    const ticket = (await join(id, 'bo')).body;
    const admitted = await pollUntil(id, ticket.id, 'admitted');
    expect(Date.parse(admitted.body.admissionExpiresAt)).toBeGreaterThan(Date.now() + 20_000);
    const order = await send('POST', '/orders', { userId: 'bo', productId: id, admission: admitted.body.admission });
    expect(order.status).toBe(201);
    const after = await poll(id, ticket.id);
    expect(after.body).toMatchObject({ status: 'ordered' });
    expect(after.body.admission).toBeUndefined();
    const row = await withDb((db) => db.query('SELECT admission_position FROM orders WHERE id = $1', [order.body.id]));
    expect(Number(row.rows[0].admission_position)).toBe(admitted.body.position);
  });

  it('says sold_out to a waiting ticket while nothing is left, and waiting (then admitted) in its place when a unit comes back', async () => {
    const id = await product({ stock: 1, waitingRoom: true, admissionTtlS: 30 });
    const first = (await join(id, 'cy')).body;
    const admitted = await pollUntil(id, first.id, 'admitted');
    // Joined once the first's bucket was drawn: a later bucket, so behind it.
    const second = (await join(id, 'di')).body;
    // Ratio 1, one unit: the second waits, right behind, while the first holds the admission.
    expect((await poll(id, second.id)).body).toMatchObject({
      status: 'waiting',
      ahead: 1,
      position: admitted.body.position + 1,
    });
    second.position = admitted.body.position + 1;
    const order = await send('POST', '/orders', { userId: 'cy', productId: id, admission: admitted.body.admission });
    expect(order.status).toBe(201);
    const soldOut = await pollUntil(id, second.id, 'sold_out');
    expect(soldOut.body.position).toBe(second.position);
    expect((await send('POST', `/orders/${order.body.id}/cancel`, { userId: 'cy' }, shop)).status).toBe(200);
    // I8: no sold_out later than SOLD_OUT_STALE_MS (100 ms by default) after the unit came back.
    await sleep(150);
    expect((await poll(id, second.id)).body.status).not.toBe('sold_out');
    const back = await pollUntil(id, second.id, 'admitted');
    expect(back.body.position).toBe(second.position);
  });

  it('tells a buyer who joins once nothing is left so in the join, at once, and keeps that ticket a place behind the others for units that come back', async () => {
    const id = await product({ stock: 1, waitingRoom: true, admissionTtlS: 30 });
    const first = (await join(id, 'fa')).body;
    const admitted = await pollUntil(id, first.id, 'admitted');
    const second = (await join(id, 'gu')).body;
    const order = await send('POST', '/orders', { userId: 'fa', productId: id, admission: admitted.body.admission });
    expect(order.status).toBe(201);
    const placed = await pollUntil(id, second.id, 'sold_out');
    const late = await join(id, 'hu');
    expect(late.status).toBe(201);
    expect(late.body).toMatchObject({ status: 'sold_out', position: null });
    expect(late.headers['retry-after']).toBe('5');
    // Its next poll waits for the draw: sold out, in its place behind the others.
    const latePlaced = await pollUntil(id, late.body.id, 'sold_out');
    expect(latePlaced.body.position).toBeGreaterThan(placed.body.position);
    expect((await send('POST', `/orders/${order.body.id}/cancel`, { userId: 'fa' }, shop)).status).toBe(200);
    const back = await pollUntil(id, late.body.id, 'waiting', 'admitted');
    expect(back.body.position).toBe(latePlaced.body.position);
  });

  it('keeps an admission whose buyer was told sold_out from running out until units come back, then lets it order', async () => {
    // Ratio 1, two units: both buyers admitted; the first takes both, so the second is told sold_out.
    const id = await product({ stock: 2, limitPerUser: 2, waitingRoom: true, admissionTtlS: 30 });
    const ev = (await join(id, 'ev')).body;
    const fa = (await join(id, 'fa')).body;
    const evAdmitted = await pollUntil(id, ev.id, 'admitted');
    const faAdmitted = await pollUntil(id, fa.id, 'admitted');
    const order = await send('POST', '/orders', {
      userId: 'ev',
      productId: id,
      quantity: 2,
      admission: evAdmitted.body.admission,
    });
    expect(order.status).toBe(201);
    expect((await pollUntil(id, fa.id, 'sold_out')).body.position).toBe(faAdmitted.body.position);
    // The admission clock finds no unit left with an admission live, and pauses the room.
    const until = (what: string, holds: () => Promise<boolean>) =>
      waitFor(() => `${what}\n${svc.output()}`, holds, 30_000, 50);
    const pausedGauge = async () =>
      (await send('GET', '/metrics')).text
        .split('\n')
        .find((l) => l.startsWith(`flashsale_queue_admissions_paused{product="${id}"}`))
        ?.split(' ')[1];
    await until('the pause', async () => (await pausedSince(id)) !== null && (await pausedGauge()) === '1');
    // The spec moves the clock instead of waiting: the admission ran out during the pause.
    await pauseLongAgo(id);
    // Longer than a tick: the poll reads the room again, its copy being older than that.
    await sleep(100);
    expect((await poll(id, fa.id)).body).toMatchObject({ status: 'sold_out', position: faAdmitted.body.position });
    // Units back: the admission runs again with the 20 s it had left at the pause.
    expect((await send('POST', `/orders/${order.body.id}/cancel`, { userId: 'ev' }, shop)).status).toBe(200);
    const back = await pollUntil(id, fa.id, 'admitted', 'ended');
    expect(back.body).toMatchObject({ status: 'admitted', position: faAdmitted.body.position });
    expect(Date.parse(back.body.admissionExpiresAt)).toBeGreaterThan(Date.now() + 10_000);
    // The clock runs again (the step that resumes may come a tick after the poll that saw units back).
    await until('the resume', async () => (await pausedSince(id)) === null && (await pausedGauge()) === '0');
    const faOrder = await send('POST', '/orders', { userId: 'fa', productId: id, admission: back.body.admission });
    expect(faOrder.status).toBe(201);
  });

  it('refuses every hostile admission with 403 and changes nothing', async () => {
    const id = await product({ stock: 10, waitingRoom: true, admissionTtlS: 30 });
    const other = await product({ stock: 10, waitingRoom: true });
    const open = await product({ stock: 10 });
    const t = (await join(id, 'eve')).body;
    const real = (await pollUntil(id, t.id, 'admitted')).body.admission as string;
    const exp = Math.floor(Date.now() / 1000) + 60;
    const claims = { sub: 'eve', pid: id, tid: t.id, pos: t.position, exp };
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['none', { userId: 'eve', productId: id }, 'ADMISSION_REQUIRED'],
      [
        'forged',
        { userId: 'eve', productId: id, admission: createSigner({ key: 'x'.repeat(40) })(claims) },
        'ADMISSION_INVALID',
      ],
      [
        'expired',
        { userId: 'eve', productId: id, admission: sign({ ...claims, exp: exp - 120 }) },
        'ADMISSION_INVALID',
      ],
      ["another user's", { userId: 'mallory', productId: id, admission: real }, 'ADMISSION_INVALID'],
      ["another product's", { userId: 'eve', productId: other, admission: real }, 'ADMISSION_INVALID'],
      [
        'of a product without a waiting room',
        { userId: 'eve', productId: id, admission: sign({ ...claims, pid: open }) },
        'ADMISSION_INVALID',
      ],
      ['on a product without a waiting room', { userId: 'eve', productId: open, admission: real }, 'ADMISSION_INVALID'],
      ['not a string', { userId: 'eve', productId: id, admission: 12 }, 'VALIDATION_FAILED'],
    ];
    const before = await snapshot();
    for (const [name, body, code] of cases) {
      const r = await send('POST', '/orders', body);
      expectError(r, code === 'VALIDATION_FAILED' ? 400 : 403, code);
      expect({ name, after: await snapshot() }).toEqual({ name, after: before });
    }
    // Spent: the order it made was cancelled; the admission does not come back.
    const order = await send('POST', '/orders', { userId: 'eve', productId: id, admission: real });
    expect(order.status).toBe(201);
    expect((await send('POST', `/orders/${order.body.id}/cancel`, { userId: 'eve' }, shop)).status).toBe(200);
    const spentBefore = await snapshot();
    const again = await send('POST', '/orders', { userId: 'eve', productId: id, admission: real });
    expectError(again, 403, 'ADMISSION_INVALID');
    expect(again.body.message).toMatch(/spent/);
    expect(await snapshot()).toEqual(spentBefore);
  });

  it('answers joins and polls that cannot be: no room, unknown product or ticket, bad user, after the end', async () => {
    const open = await product({ stock: 1 });
    expectError(await join(open, 'fay'), 409, 'NO_WAITING_ROOM');
    expectError(await join(999_999, 'fay'), 404, 'PRODUCT_NOT_FOUND');
    // A malformed product id is a bad request, on the queue's paths as on every product path.
    expectError(await send('POST', '/products/abc/queue', { userId: 'fay' }), 400, 'VALIDATION_FAILED');
    expectError(await send('GET', '/products/1e3/queue/fairness'), 400, 'VALIDATION_FAILED');
    const r = await send('POST', `/products/${open}/queue`, { userId: 'bad user' });
    expectError(r, 400, 'VALIDATION_FAILED');
    const id = await product({ stock: 1, waitingRoom: true });
    expectError(await poll(id, 'f'.repeat(24)), 404, 'TICKET_NOT_FOUND');
    expectError(await poll(id, 'not-a-ticket'), 404, 'TICKET_NOT_FOUND');
    expectError(await send('GET', `/products/${open}/queue/fairness`), 409, 'NO_WAITING_ROOM');
    const ended = await product({
      stock: 1,
      waitingRoom: true,
      startsAt: new Date(Date.now() - 60_000).toISOString(),
      endsAt: new Date(Date.now() - 1000).toISOString(),
    });
    expectError(await join(ended, 'fay'), 403, 'SALE_ENDED');
  });

  it('keeps the pre-queue without positions until the start, publishing only the seed hash', async () => {
    const id = await product({ stock: 1, waitingRoom: true, startsAt: new Date(Date.now() + 3_600_000).toISOString() });
    const t = await join(id, 'gus');
    expect(t.status).toBe(201);
    expect(t.body).toMatchObject({ status: 'waiting', position: null, ahead: null });
    expect(t.body.estimatedWaitS).toBeGreaterThan(3000);
    expect(Number(t.headers['retry-after'])).toBe(30);
    const fair = await send('GET', `/products/${id}/queue/fairness`);
    expect(fair.body).toEqual({
      seedHash: expect.stringMatching(/^[0-9a-f]{64}$/),
      preQueue: null,
      algorithm: expect.any(String),
    });
    // An order before admission is refused (the window first: the sale has not started).
    expect((await send('POST', '/orders', { userId: 'gus', productId: id })).body.code).toBe('SALE_NOT_STARTED');
  });

  it("times a pre-queue ticket's first poll after the start by its lottery key, as the revealed seed confirms", async () => {
    // 3 units at ratio 1: the first admission is 3 places. 40 tickets in the pre-queue: a ticket
    // polls at the start when its key's share x 40 lies within 3.3 places, a second later within
    // 6.6, else two seconds later. Far enough ahead for the joins and polls on a loaded machine:
    // the start is then moved up to now, as an operator may.
    const id = await product({ stock: 3, waitingRoom: true, startsAt: new Date(Date.now() + 25_000).toISOString() });
    const users = Array.from({ length: 40 }, (_, i) => `wave-${i}`);
    const tickets = await Promise.all(users.map(async (u) => (await join(id, u)).body));
    // The room's pre-queue count as this process's admitter last read it (what the waves are paced by).
    const counted = async () =>
      (await send('GET', '/metrics')).text
        .split('\n')
        .find((l) => l.startsWith(`flashsale_queue_pre_queue{product="${id}"}`))
        ?.split(' ')[1];
    await waitFor(
      () => `the pre-queue count to reach 40\n${svc.output()}`,
      async () => (await counted()) === '40',
      30_000,
      20,
    );
    // Before the start: Retry-After is the seconds until the start (estimatedWaitS) plus the wave; a
    // ticket due at the start (wave 0) is asked back a second before it, to be paced again then.
    const waves = new Map<string, number>();
    for (const t of tickets) {
      const r = await poll(id, t.id);
      expect(r.body).toMatchObject({ status: 'waiting', position: null });
      waves.set(t.lotteryId, Number(r.headers['retry-after']) - r.body.estimatedWaitS);
    }
    const opened = await send('PATCH', `/admin/products/${id}`, { startsAt: new Date().toISOString() }, admin);
    expect(opened.status).toBe(200);
    await pollUntil(id, tickets[0].id, 'waiting', 'admitted', 'sold_out');
    const { seed } = (await send('GET', `/products/${id}/queue/fairness`)).body;
    for (const t of tickets) {
      const key = createHmac('sha256', Buffer.from(seed, 'hex')).update(t.lotteryId).digest();
      const share = key.readUInt32BE(0) / 2 ** 32;
      const wave = Math.min(2, Math.floor((share * 40) / 3.3));
      expect({ ticket: t.lotteryId, told: waves.get(t.lotteryId) }).toEqual({
        ticket: t.lotteryId,
        told: wave === 0 ? -1 : wave,
      });
    }
    // Most of the pre-queue is told to come last (the draw is uniform: about 32 of 40 here).
    expect([...waves.values()].filter((w) => w === 2).length).toBeGreaterThan(20);
  });
});

describe('the waiting room at its start', () => {
  let svc: InProcessService;
  beforeAll(async () => {
    // A tick a second: the draw comes at a tick, and a poll can be sent between the start and it.
    svc = await startInProcess({ ...env, ADMISSION_TICK_MS: '1000' });
  });
  afterAll(() => svc?.close());

  it('answers a pre-queue ticket polled after the start but before the draw once the draw and first admission are made, not a second later', async () => {
    const startsAt = Date.now() + 3000;
    const created = await svc.request(
      'POST',
      '/admin/products',
      { name: 'opening', stock: 2, segments: 1, waitingRoom: true, startsAt: new Date(startsAt).toISOString() },
      admin,
    );
    const id = created.body.id as number;
    const ann = await svc.request('POST', `/products/${id}/queue`, { userId: 'ann' });
    expect({ status: ann.status, position: ann.body.position }).toEqual({ status: 201, position: null });
    await withDb(async (db) => {
      // The test holds the room's row as a process making the draw would: the admitter, which
      // takes it with SKIP LOCKED, can make neither the draw nor an admission meanwhile.
      await db.query('BEGIN');
      await db.query('SELECT 1 FROM waiting_rooms WHERE product_id = $1 FOR UPDATE', [id]);
      await waitFor('the start', () => Date.now() > startsAt, 30_000, 20);
      let answered = false;
      const polled = svc.request('GET', `/products/${id}/queue/${ann.body.id}`).finally(() => (answered = true));
      await sleep(300);
      // Not answered while no draw can be made (it would have said: no place yet, come back in a second).
      expect(answered).toBe(false);
      await db.query('COMMIT');
      const r = await polled;
      expect(r.body).toMatchObject({ status: 'admitted', position: 1, admission: expect.any(String) });
      expect(r.headers['retry-after']).toBe('1');
    });
  });
});

describe('the waiting room with buyer identity on (I9)', () => {
  let svc: InProcessService;
  beforeAll(async () => {
    svc = await startInProcess({ ...env, BUYER_JWT_SECRET: BUYER_SECRET });
  });
  afterAll(() => svc?.close());

  it("binds a ticket to the token's user: no join for another, no read of another's ticket", async () => {
    const created = await svc.request(
      'POST',
      '/admin/products',
      { name: 'q', stock: 2, segments: 1, waitingRoom: true },
      admin,
    );
    const id = created.body.id as number;
    const auth = (u: string) => ({ authorization: `Bearer ${buyerToken(u)}` });
    expectError(await svc.request('POST', `/products/${id}/queue`, {}), 401, 'UNAUTHENTICATED');
    expectError(
      await svc.request('POST', `/products/${id}/queue`, { userId: 'hal' }, auth('ivy')),
      403,
      'IDENTITY_MISMATCH',
    );
    const mine = await svc.request('POST', `/products/${id}/queue`, {}, auth('ivy'));
    expect(mine.status).toBe(201);
    expect(mine.body.userId).toBe('ivy');
    // The token names the user: a join needs no body at all.
    const bare = await svc.request('POST', `/products/${id}/queue`, undefined, auth('jo'));
    expect({ status: bare.status, userId: bare.body.userId }).toEqual({ status: 201, userId: 'jo' });
    expect((await svc.request('GET', `/products/${id}/queue/${mine.body.id}`, undefined, auth('ivy'))).status).toBe(
      200,
    );
    expectError(
      await svc.request('GET', `/products/${id}/queue/${mine.body.id}`, undefined, auth('hal')),
      404,
      'TICKET_NOT_FOUND',
    );
    expectError(await svc.request('GET', `/products/${id}/queue/${mine.body.id}`), 401, 'UNAUTHENTICATED');
  });
});

describe('the waiting room behind the door: budgets, and polls answered from memory', () => {
  let svc: InProcessService;
  beforeAll(async () => {
    // Ticks once a second, so the clock-driven reads are few and polls are what is counted; no
    // report to the operator page (its own Redis traffic, once a second) and no expiry sweep (its
    // statement once a second): the product's terms, read once a second, are then the one
    // statement a poll may cause.
    svc = await startInProcess({
      ...env,
      ADMISSION_TICK_MS: '1000',
      SOLD_OUT_STALE_MS: '1000',
      RATE_LIMIT_USER: '0',
      LIVE_STATS_MS: '0',
      EXPIRY_SWEEP_MS: '0',
    });
  });
  afterAll(() => svc?.close());

  it('answers polls of waiting tickets without a PostgreSQL statement or a Redis command of their own', async () => {
    const created = await svc.request(
      'POST',
      '/admin/products',
      { name: 'polled', stock: 20, segments: 2, waitingRoom: true },
      admin,
    );
    const id = created.body.id as number;
    const users = Array.from({ length: 150 }, (_, i) => `poller-${i}`);
    const tickets = await Promise.all(
      users.map(async (u) => (await svc.request('POST', `/products/${id}/queue`, { userId: u })).body.id as string),
    );
    // Wait for the positions and for the admission (ratio 1: 20 admitted), then keep the tickets that
    // wait. (A poll of an admitted ticket asks PostgreSQL whether its admission was spent: picking
    // the waiting tickets before the admission was made would count those lookups.)
    const waiting = await waitFor(
      '20 admitted and every ticket placed',
      async () => {
        const answers = await Promise.all(tickets.map((t) => svc.request('GET', `/products/${id}/queue/${t}`)));
        const admitted = answers.filter((a) => a.body.status === 'admitted').length;
        return admitted === 20 && answers.every((a) => a.body.position !== null)
          ? answers.filter((a) => a.body.status === 'waiting').map((a) => a.body.id as string)
          : null;
      },
      30_000,
      50,
    );
    expect(waiting.length).toBe(130);
    const counts = async () => [await statementCalls({ except: CLOCK }), await redisCommandCount()] as const;
    const [pgBefore, redisBefore] = await counts();
    const started = Date.now();
    for (let round = 0; round < 3; round++)
      for (const t of waiting) expect((await svc.request('GET', `/products/${id}/queue/${t}`)).status).toBe(200);
    const seconds = Math.ceil((Date.now() - started) / 1000) + 1;
    const [pgAfter, redisAfter] = await counts();
    // The polls add nothing. Allowed for: the product's terms read once a second (PRODUCT_CACHE_MS);
    // the clock's PostgreSQL statements are left out by their tag, and the queue has nothing in Redis.
    const ran = callsBetween(pgBefore, pgAfter);
    const statements = Object.values(ran).reduce((a, b) => a + b, 0);
    // At most `seconds` statements; a failure shows which ran.
    expect({ statements, ran }).toEqual({ statements: Math.min(statements, seconds), ran });
    expect(redisAfter - redisBefore).toBe(0);
  });
});

describe('the waiting room behind the door: a user over budget', () => {
  let svc: InProcessService;
  beforeAll(async () => {
    svc = await startInProcess({ ...env, RATE_LIMIT_USER: '1,2' });
  });
  afterAll(() => svc?.close());

  it('refuses joins past the user budget with 429 and Retry-After, holding back no other user', async () => {
    const created = await svc.request(
      'POST',
      '/admin/products',
      { name: 'limited', stock: 2, segments: 1, waitingRoom: true },
      admin,
    );
    const id = created.body.id as number;
    const first = await svc.request('POST', `/products/${id}/queue`, { userId: 'greedy' });
    expect(first.status).toBe(201);
    const second = await svc.request('POST', `/products/${id}/queue`, { userId: 'greedy' });
    const third = await svc.request('POST', `/products/${id}/queue`, { userId: 'greedy' });
    // Budget 2 per 2 s: the join and its repeat; the third is refused (with identity off a poll names
    // no user: it counts against the address's budget, off here).
    expect([second.status, third.status]).toEqual([200, 429]);
    expect(third.body.code).toBe('RATE_LIMITED');
    expect(Number(third.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    // Another user is not held back by it.
    expect((await svc.request('POST', `/products/${id}/queue`, { userId: 'patient' })).status).toBe(201);
  });
});
