// The order event stream across two service processes on one PostgreSQL and one Redis: a storm of
// orders with payments, cancels, expiries, a rebalance and a restock, after which the events read
// from a cursor (as JSON pages on one process and as Server-Sent Events on the other) reproduce
// every order's final state and the product's stock; a long-poll that wakes on a new event; the
// stream's refusals (no token, a buyer, a bad cursor, a pruned cursor).
import http from 'node:http';
import { Client } from 'pg';
import { sleep, waitFor } from './support/wait';
import { resetState, withDb } from './support/database';
import { cursorsAscending, expectReplayMatches, readEvents, StreamEvent } from './support/events';
import {
  admin,
  createProduct,
  pooled,
  request,
  sender,
  ServiceProcess,
  shop,
  startedTogether,
  startService,
  testUrls,
} from './support/service';

const CONCURRENCY = 48;

/** Reads the SSE stream of `base` from `after` until `until` says it has all, then closes it. */
function readSse(
  base: string,
  after: string,
  until: (events: StreamEvent[]) => boolean,
  headers: Record<string, string> = {},
): Promise<StreamEvent[]> {
  return new Promise((resolve, reject) => {
    const events: StreamEvent[] = [];
    const req = http.get(
      `${base}/events?after=${after}`,
      { headers: { accept: 'text/event-stream', ...shop, ...headers } },
      (res) => {
        if (res.statusCode !== 200) {
          reject(new Error(`SSE: ${res.statusCode}`));
          return;
        }
        let buffer = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          buffer += chunk;
          let end: number;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const frame = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const data = frame.split('\n').find((l) => l.startsWith('data: '));
            const id = frame.split('\n').find((l) => l.startsWith('id: '));
            if (!data || !id) continue;
            const e = JSON.parse(data.slice(6)) as StreamEvent;
            // The SSE id is the cursor to resume from.
            if (id.slice(4) !== e.cursor) reject(new Error(`SSE id ${id} is not the event's cursor ${e.cursor}`));
            events.push(e);
          }
          if (until(events)) {
            req.destroy();
            resolve(events);
          }
        });
      },
    );
    req.on('error', (err) => (err.message.includes('aborted') ? undefined : reject(err)));
    setTimeout(() => {
      req.destroy();
      reject(new Error(`SSE: ${events.length} events after 60 s`));
    }, 60_000).unref();
  });
}

describe('the order event stream across two service processes', () => {
  let a: ServiceProcess;
  let b: ServiceProcess;
  let db: Client;

  beforeAll(async () => {
    await resetState();
    db = new Client({ connectionString: testUrls().databaseUrl });
    await db.connect();
    const env = { EXPIRY_SWEEP_MS: '50', EVENTS_POLL_MS: '50' };
    [a, b] = await startedTogether([startService(env), startService(env)]);
  });
  afterAll(async () => {
    await db?.end();
    await Promise.all([a?.stop(), b?.stop()]);
  });

  /**
   * A product's events after its creation is handed out to readers (the answer that shows it): an
   * event is handed out once every transaction older than it has ended on the whole server (its
   * snapshot's xmin), and the other jest worker's transactions, on its own database, count too.
   */
  const creationHandedOut = (productId: number) =>
    waitFor(`product ${productId}'s creation in the stream`, async () => {
      const r = (await request(a.url, 'GET', `/events?limit=1000&productId=${productId}`, undefined, shop)).body;
      return r.events.some((e: StreamEvent) => e.type === 'product.created') ? (r as { next: string }) : null;
    });

  it('reproduces every order and the stock from the events of a storm with payments, cancels, expiries, a rebalance and a restock', async () => {
    // Reservations last an hour, far longer than the storm at any speed: a unit comes back only when
    // the spec says so (a cancel, or the expiry it causes below), so the counts hold on a slow machine.
    const p = await createProduct(a.url, { stock: 240, segments: 4, paymentTimeoutS: 3600 });
    const at = (i: number) => (i % 2 === 0 ? a.url : b.url);
    type Sold = { id: number; userId: string };
    const wave = async (from: number, n: number): Promise<Sold[]> => {
      const replies = await pooled(
        Array.from({ length: n }, (_, k) => () => {
          const userId = `storm-${from + k}`;
          return request(at(k), 'POST', '/orders', { userId, productId: p.id }).then((r) => ({ r, userId }));
        }),
        CONCURRENCY,
      );
      return replies.filter(({ r }) => r.status === 201).map(({ r, userId }) => ({ id: r.body.id as number, userId }));
    };
    // Orders are paid, cancelled or left to expire, each third on either process.
    const settle = (sold: Sold[], thirds: Array<'pay' | 'cancel'> = ['pay', 'cancel']) =>
      pooled(
        sold.map((o, i) => () => {
          if (i % 3 === 0 && thirds.includes('pay'))
            return request(at(i + 1), 'POST', `/orders/${o.id}/pay`, { userId: o.userId }, shop);
          if (i % 3 === 1 && thirds.includes('cancel'))
            return request(at(i), 'POST', `/orders/${o.id}/cancel`, { userId: o.userId }, shop);
          return Promise.resolve(null);
        }),
        CONCURRENCY,
      );
    const first = await wave(0, 400);
    expect(first.length).toBe(240);
    // The first wave's cancels put 80 units back before the second wave, which therefore sells; the
    // first wave's payments, a rebalance and a restock land while it runs.
    await settle(first, ['cancel']);
    const [second] = await Promise.all([
      wave(400, 300).then(async (sold) => (await settle(sold), sold)),
      settle(first, ['pay']),
      request(b.url, 'POST', `/admin/products/${p.id}/rebalance`, { segments: 6 }, admin).then((r) =>
        expect(r.status).toBe(200),
      ),
      request(a.url, 'POST', `/admin/products/${p.id}/restock`, { units: 30 }, admin).then((r) =>
        expect(r.status).toBe(200),
      ),
    ]);
    expect(second.length).toBeGreaterThan(0);
    // The reservations left unpaid reach their deadline now (set in PostgreSQL, whose clock the
    // sweep compares with), and the sweeps expire them and put their units back.
    const unpaid = await db.query(
      `UPDATE orders SET expires_at = now() - interval '1 second' WHERE product_id = $1 AND status = 'reserved'`,
      [p.id],
    );
    expect(unpaid.rowCount).toBeGreaterThan(0);
    await waitFor(
      'every reservation to expire',
      async () =>
        (await db.query(`SELECT 1 FROM orders WHERE product_id = $1 AND status = 'reserved'`, [p.id])).rowCount === 0,
      60_000,
    );

    // Every expiry handed out to readers (like the creation above): as many as orders expired.
    const expired = (
      await db.query(`SELECT count(*)::int AS n FROM orders WHERE product_id = $1 AND status = 'expired'`, [p.id])
    ).rows[0].n as number;
    const events = await waitFor('every expiry in the stream', async () => {
      const got = await readEvents(sender(b.url));
      return got.filter((e) => e.type === 'order.expired' && e.productId === p.id).length === expired ? got : null;
    });
    expect(cursorsAscending(events)).toBe(true);
    const r = await expectReplayMatches(db, p.id, events);
    const statuses = [...r.orders.values()].map((o) => o.statuses.join('>'));
    for (const life of ['reserved>paid', 'reserved>cancelled', 'reserved>expired'])
      expect(statuses.filter((s) => s === life).length).toBeGreaterThan(0);
    expect(r.soldOut).toBeGreaterThanOrEqual(1);
    expect(events.filter((e) => e.type === 'product.rebalanced').map((e) => e.data.segments.length)).toEqual([6]);
    expect(events.filter((e) => e.type === 'product.restocked').map((e) => e.data.units)).toEqual([30]);

    // The same stream as Server-Sent Events from the other process, resumed halfway with
    // Last-Event-ID: the same events in the same order.
    const half = Math.floor(events.length / 2);
    const head = await readSse(a.url, '0-0', (got) => got.length >= half);
    const tail = await readSse(a.url, '0-0', (got) => got.length >= events.length - half, {
      'last-event-id': head[half - 1].cursor,
    });
    expect([...head.slice(0, half), ...tail].map((e) => e.cursor)).toEqual(events.map((e) => e.cursor));
  });

  it('answers a long-poll as soon as an event commits, and with none when the wait runs out', async () => {
    const p = await createProduct(a.url, { stock: 5, segments: 1 });
    const { next } = await creationHandedOut(p.id);
    const empty = await request(b.url, 'GET', `/events?after=${next}&wait=1`, undefined, shop);
    expect({ status: empty.status, events: empty.body.events, next: empty.body.next }).toEqual({
      status: 200,
      events: [],
      next,
    });
    // This product's events only: another spec's (or test's) late events must not wake it.
    const asked = Date.now();
    const waiting = request(b.url, 'GET', `/events?after=${next}&wait=60&productId=${p.id}`, undefined, shop);
    await sleep(300); // the long-poll on its way before the order
    const ordered = await request(a.url, 'POST', '/orders', { userId: 'long-poller', productId: p.id });
    expect(ordered.status).toBe(201);
    const woke = await waiting;
    expect(woke.body.events.map((e: StreamEvent) => [e.type, e.orderId])).toEqual([
      ['order.reserved', ordered.body.id],
    ]);
    // Woken by the event, not by the end of the wait (60 s after it was asked, however slow the machine).
    expect(Date.now() - asked).toBeLessThan(60_000);
  });

  it('refuses readers without the shop or admin token, malformed cursors and limits, and a cursor older than what is kept', async () => {
    expect((await request(a.url, 'GET', '/events')).status).toBe(401);
    expect((await request(a.url, 'GET', '/events', undefined, { authorization: 'Bearer nope-nope-nope' })).status).toBe(
      401,
    );
    expect((await request(a.url, 'GET', '/events?limit=5', undefined, admin)).status).toBe(200);
    for (const q of [
      'after=12',
      'after=1-2-3',
      'after=-1-2',
      'limit=0',
      'limit=1001',
      'wait=61',
      'productId=x',
      'other=1',
    ]) {
      const r = await request(a.url, 'GET', `/events?${q}`, undefined, shop);
      expect({ q, status: r.status, code: r.body.code }).toEqual({ q, status: 400, code: 'VALIDATION_FAILED' });
    }
    // Prune the oldest events as the pruner would after EVENTS_RETENTION_S (their time set back).
    const all = await readEvents(sender(a.url));
    const cut = all[9].cursor;
    await withDb(async (d) => {
      const [tx, id] = cut.split('-');
      await d.query(`DELETE FROM order_events WHERE (tx, id) <= ($1::xid8, $2::bigint)`, [tx, id]);
      await d.query(`UPDATE event_marks SET tx = $1::xid8, id = $2::bigint WHERE name = 'pruned'`, [tx, id]);
    });
    const stale = await request(a.url, 'GET', `/events?after=${all[4].cursor}`, undefined, shop);
    expect({ status: stale.status, code: stale.body.code }).toEqual({ status: 410, code: 'EVENTS_PRUNED' });
    expect(stale.body.message).toContain(cut);
    const onward = await request(a.url, 'GET', `/events?after=${cut}&limit=1`, undefined, shop);
    expect(onward.body.events.map((e: StreamEvent) => e.cursor)).toEqual([all[10].cursor]);
  });
  it('refuses a cursor after the newest event, as ?after and as Last-Event-ID, saying which is the newest', async () => {
    const p = await createProduct(a.url, { stock: 3, segments: 1 });
    await creationHandedOut(p.id);
    const all = await readEvents(sender(a.url));
    const seen = all[all.length - 1].cursor;
    const asPair = (c: string) => c.split('-').map(BigInt) as [bigint, bigint];
    const notBefore = (x: string, y: string) => {
      const [[xt, xi], [yt, yi]] = [asPair(x), asPair(y)];
      return xt > yt || (xt === yt && xi >= yi);
    };
    // Far enough ahead that no event written meanwhile (other specs' expiries) can catch up with them.
    const [tx] = asPair(seen);
    for (const ahead of [`${tx + 10n ** 12n}-0`, '9223372036854775807-9223372036854775807']) {
      const asSse: Record<string, string> = { ...shop, accept: 'text/event-stream', 'last-event-id': ahead };
      for (const headers of [{ ...shop } as Record<string, string>, asSse]) {
        const path = headers['last-event-id'] ? '/events' : `/events?after=${ahead}`;
        const r = await request(b.url, 'GET', path, undefined, headers);
        expect({ ahead, status: r.status, code: r.body.code }).toEqual({ ahead, status: 400, code: 'CURSOR_AHEAD' });
        // The newest cursor there is: at or after the newest this spec read, and before the one refused.
        expect(notBefore(r.body.newest, seen)).toBe(true);
        expect(notBefore(r.body.newest, ahead)).toBe(false);
        expect(r.body.message).toContain(r.body.newest);
        const onward = await request(b.url, 'GET', `/events?after=${r.body.newest}&limit=1`, undefined, shop);
        expect(onward.status).toBe(200);
      }
    }
    // The newest itself, and the start, are cursors a reader may hold.
    const atHead = await request(b.url, 'GET', `/events?after=${seen}&productId=${p.id}`, undefined, shop);
    expect({ status: atHead.status, events: atHead.body.events }).toEqual({ status: 200, events: [] });
    expect((await request(b.url, 'GET', '/events?after=0-0&limit=1', undefined, shop)).status).toBe(200);
  });

  it('answers 404 PRODUCT_NOT_FOUND for a productId filter that names no product', async () => {
    for (const accept of ['application/json', 'text/event-stream']) {
      const r = await request(a.url, 'GET', '/events?productId=2147483647', undefined, { ...shop, accept });
      expect({ accept, status: r.status, code: r.body.code }).toEqual({
        accept,
        status: 404,
        code: 'PRODUCT_NOT_FOUND',
      });
    }
  });

  it('writes product.sold_out after the order.reserved that took the last unit, in its transaction', async () => {
    const p = await createProduct(a.url, { stock: 6, segments: 3 });
    const replies = await pooled(
      Array.from(
        { length: 9 },
        (_, k) => () =>
          request(k % 2 === 0 ? a.url : b.url, 'POST', '/orders', { userId: `last-unit-${k}`, productId: p.id }),
      ),
      9,
    );
    expect(replies.filter((r) => r.status === 201)).toHaveLength(6);
    let events: StreamEvent[] = [];
    await waitFor('the sold-out event', async () => {
      events = (await request(a.url, 'GET', `/events?productId=${p.id}&limit=100`, undefined, shop)).body.events;
      return events.some((e) => e.type === 'product.sold_out');
    });
    const types = events.map((e) => e.type);
    expect(types.filter((t) => t === 'product.sold_out')).toHaveLength(1);
    const soldOut = types.indexOf('product.sold_out');
    const reserved = events.filter((e) => e.type === 'order.reserved');
    expect(reserved).toHaveLength(6);
    // The cause first: the reservation that took the last unit, in the same transaction. (Another
    // transaction's reservation may sort after the sell-out: the stream is in transaction-id order,
    // and a transaction that took its id later can commit before the one that emptied the product.)
    const txOf = (e: StreamEvent) => e.cursor.split('-')[0];
    expect(txOf(events[soldOut])).toBe(txOf(events[soldOut - 1]));
    expect(events[soldOut - 1].type).toBe('order.reserved');
  });
});
