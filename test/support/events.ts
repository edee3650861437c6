// The event stream as a shop reads it: every event after a cursor (GET /events, page by page), the
// orders and the stock replayed from the events alone, the check of that replay against PostgreSQL,
// and a webhook receiver whose answers a spec scripts (fail, time out, answer slowly).
import http from 'node:http';
import { AddressInfo } from 'node:net';
import { Client } from 'pg';
import type { StreamEvent as ServiceEvent } from '../../src/events/events.repository';
import { verifySignature } from '../../src/events/webhook-signature';
import { shop, Send } from './service';

/** An event as the service hands it out, its `data` loosely typed for the specs to read. */
export type StreamEvent = Omit<ServiceEvent, 'data'> & { data: Record<string, any> };

/** Every event after `after`, read in pages of `limit` through GET /events (the shop's token). */
export async function readEvents(send: Send, after = '0-0', limit = 250): Promise<StreamEvent[]> {
  const all: StreamEvent[] = [];
  let cursor = after;
  for (;;) {
    const r = await send('GET', `/events?after=${cursor}&limit=${limit}`, undefined, shop);
    if (r.status !== 200) throw new Error(`GET /events: ${r.status} ${r.text}`);
    all.push(...(r.body.events as StreamEvent[]));
    if (r.body.events.length < limit) return all;
    cursor = r.body.next as string;
  }
}

/** (tx, id) of a cursor, compared as numbers. */
export function cursorKey(cursor: string): [bigint, bigint] {
  const [tx, id] = cursor.split('-').map((p) => BigInt(p));
  return [tx, id];
}

export function cursorsAscending(events: Array<{ cursor: string }>): boolean {
  for (let i = 1; i < events.length; i++) {
    const [a, b] = [cursorKey(events[i - 1].cursor), cursorKey(events[i].cursor)];
    if (!(a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]))) return false;
  }
  return true;
}

export interface Replayed {
  /** Each order's statuses in the order the stream gave them, and what it was. */
  orders: Map<number, { statuses: string[]; userId: string; quantity: number }>;
  /** The product's stock by the events: created + restocked - reserved + returned. */
  stock: number;
  /** Units the units.returned events put back. */
  returned: number;
  soldOut: number;
}

/** What a shop knows of one product from its events alone. */
export function replay(events: StreamEvent[], productId: number): Replayed {
  const orders: Replayed['orders'] = new Map();
  let stock = 0;
  let returned = 0;
  let soldOut = 0;
  for (const e of events.filter((x) => x.productId === productId)) {
    switch (e.type) {
      case 'product.created':
        stock += e.data.stock as number;
        break;
      case 'product.restocked':
        stock += e.data.units as number;
        break;
      case 'units.returned':
        stock += e.data.quantity as number;
        returned += e.data.quantity as number;
        break;
      case 'product.sold_out':
        soldOut++;
        break;
      default:
        if (e.type.startsWith('order.')) {
          const o = orders.get(e.orderId as number) ?? {
            statuses: [] as string[],
            userId: e.data.userId as string,
            quantity: e.data.quantity,
          };
          o.statuses.push(e.data.status as string);
          if (e.type === 'order.reserved') stock -= e.data.quantity as number;
          orders.set(e.orderId as number, o);
        }
    }
  }
  return { orders, stock, returned, soldOut };
}

/**
 * The replay against PostgreSQL: the same orders (user, quantity, final status), each one's life in
 * order (reserved first, then at most one of paid, cancelled, expired), the same stock, and as many
 * units returned as the closed orders held.
 */
export async function expectReplayMatches(db: Client, productId: number, events: StreamEvent[]): Promise<Replayed> {
  const r = replay(events, productId);
  const { rows } = await db.query<{ id: string; user_id: string; quantity: number; status: string }>(
    'SELECT id, user_id, quantity, status FROM orders WHERE product_id = $1 ORDER BY id',
    [productId],
  );
  const [{ stock }] = (
    await db.query<{ stock: string }>('SELECT sum(stock)::text AS stock FROM stock_segments WHERE product_id = $1', [
      productId,
    ])
  ).rows;
  const fromDb = rows.map((o) => ({ id: Number(o.id), userId: o.user_id, quantity: o.quantity, status: o.status }));
  const fromEvents = [...r.orders.entries()]
    .sort(([a], [b]) => a - b)
    .map(([id, o]) => ({ id, userId: o.userId, quantity: o.quantity, status: o.statuses[o.statuses.length - 1] }));
  expect(fromEvents).toEqual(fromDb);
  const badLives = [...r.orders.entries()].filter(
    ([, o]) =>
      o.statuses[0] !== 'reserved' ||
      o.statuses.length > 2 ||
      (o.statuses.length === 2 && !['paid', 'cancelled', 'expired'].includes(o.statuses[1])),
  );
  expect(badLives).toEqual([]);
  const closed = rows.filter((o) => o.status === 'cancelled' || o.status === 'expired');
  expect({ stock: r.stock, returned: r.returned }).toEqual({
    stock: Number(stock),
    returned: closed.reduce((n, o) => n + o.quantity, 0),
  });
  return r;
}

/** How the receiver answers one delivery. */
export type Answer = 'ok' | 'fail' | 'hang' | { slowMs: number };

export interface WebhookReceiver {
  url: string;
  /** Deliveries received (whatever the answer), with their events. */
  deliveries: Array<{ events: StreamEvent[]; answer: Answer; signed: boolean }>;
  /** Every event of a delivery answered 2xx, in the order received (repeats kept). */
  acknowledged(): StreamEvent[];
  /** How the next deliveries are answered (then `then` for the rest). */
  script(answers: Answer[], then?: Answer): void;
  close(): Promise<void>;
}

export async function startReceiver(secret: string): Promise<WebhookReceiver> {
  let queue: Answer[] = [];
  let rest: Answer = 'ok';
  const deliveries: WebhookReceiver['deliveries'] = [];
  const hanging = new Set<http.ServerResponse>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const signed = verifySignature(
        secret,
        body,
        String(req.headers['flashsale-signature'] ?? ''),
        Math.floor(Date.now() / 1000),
      );
      const answer = queue.shift() ?? rest;
      deliveries.push({ events: (JSON.parse(body) as { events: StreamEvent[] }).events, answer, signed });
      if (answer === 'ok') res.end('ok');
      else if (answer === 'fail') {
        res.statusCode = 500;
        res.end('down');
      } else if (answer === 'hang') hanging.add(res);
      else setTimeout(() => res.end('ok'), answer.slowMs);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    deliveries,
    acknowledged: () => deliveries.filter((d) => d.answer !== 'fail' && d.answer !== 'hang').flatMap((d) => d.events),
    script(answers, then = 'ok') {
      queue = [...answers];
      rest = then;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of hanging) res.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The distinct events of a list (a webhook delivers at least once), keeping the first of each. */
export function distinct(events: StreamEvent[]): StreamEvent[] {
  const seen = new Set<string>();
  return events.filter((e) => (seen.has(e.cursor) ? false : (seen.add(e.cursor), true)));
}
