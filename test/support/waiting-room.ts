// A crowd of buyers in front of a waiting room, for the specs: each joins, polls its ticket as
// Retry-After paces it (never more than `inFlight` requests at once over all buyers), orders once
// admitted, and then pays, cancels or leaves its order as its part says. What every buyer saw is
// kept for the checks, which are made against PostgreSQL.
import { createHash, createHmac } from 'node:crypto';
import { AdmissionStep, admissionStepProblems } from '../../harness/queue-order';
import { withDb } from './database';
import { admin, Reply, request, shop } from './service';
import { sleep, waitFor } from './wait';

export type Part = 'pay' | 'cancel' | 'leave unpaid' | 'ignore admission';

export interface Buyer {
  userId: string;
  part: Part;
  /** The signed ticket the buyer polls with. */
  ticketId?: string;
  /** The ticket's id in the published lottery. */
  lotteryId?: string;
  /** Every status this buyer's polls answered, in order. */
  seen: string[];
  /** Polls answered 200. */
  polls: number;
  position?: number | null;
  last?: Reply;
  orderId?: number;
  orderReplies: Reply[];
  paid?: boolean;
  cancelled?: boolean;
  done: boolean;
  /** Every position this buyer's tickets were ever answered with (a lost ticket's and its new one's). */
  positions: Set<number>;
  /** Every position this buyer was answered `admitted` at. */
  admittedAt: Set<number>;
  /** Times the queue lost this buyer's ticket (404) and the buyer joined again. */
  rejoined: number;
  /** Answers other than 200 to polls, by status (and code). */
  refusals: Map<string, number>;
}

export interface CrowdOptions {
  /** The base URLs of the service processes; a buyer's calls alternate between them. */
  urls: string[];
  productId: number;
  buyers: Buyer[];
  inFlight: number;
  /** Stop when this says so (checked after every poll), or at the deadline. */
  finished: () => boolean;
  /** Epoch ms; by default CROWD_GUARD_MS from the start: a guard against a hang, not a judge of speed (saleWatch judges progress). */
  deadline?: number;
  /** Retry-After is honoured up to this many ms (a spec has no minutes to spare); default 2000. */
  longestWaitMs?: number;
  /** On 404 TICKET_NOT_FOUND (the queue lost the ticket) join again, as a storefront would; default false. */
  rejoinWhenLost?: boolean;
}

/** How long a crowd polls at most, unless told: inside the jest timeout (480 s) of the specs that run one. */
const CROWD_GUARD_MS = 400_000;

/** Polls every buyer's ticket until `finished` or the deadline; buyers order when admitted. */
export async function runCrowd(o: CrowdOptions): Promise<void> {
  const deadline = o.deadline ?? Date.now() + CROWD_GUARD_MS;
  const due = new Map<Buyer, number>(o.buyers.filter((b) => b.ticketId).map((b) => [b, Date.now()]));
  let turn = 0;
  const one = async (b: Buyer): Promise<void> => {
    const url = o.urls[turn++ % o.urls.length];
    const r = await request(url, 'GET', `/products/${o.productId}/queue/${b.ticketId}`).catch(() => null);
    if (r === null || r.status !== 200) {
      const key = r === null ? 'transport' : `${r.status} ${r.body?.code}`;
      b.refusals.set(key, (b.refusals.get(key) ?? 0) + 1);
      // A buyer who has ordered has nothing more to queue for: a lost ticket ends its part.
      if (r?.status === 404 && b.orderId !== undefined) b.done = true;
      else if (r?.status === 404 && o.rejoinWhenLost) {
        const again = await request(url, 'POST', `/products/${o.productId}/queue`, { userId: b.userId }).catch(
          () => null,
        );
        if (again?.status === 201 || again?.status === 200) {
          b.rejoined++;
          b.ticketId = again.body.id;
        }
      }
      // 503s carry Retry-After; a spec waits at most 500 ms.
      due.set(b, Date.now() + Math.min(500, Number(r?.headers['retry-after'] ?? 0.5) * 1000));
      if (r) b.last = r;
      return;
    }
    b.last = r;
    b.polls++;
    b.position = r.body.position;
    if (typeof r.body.position === 'number') b.positions.add(r.body.position);
    if (r.body.status === 'admitted') b.admittedAt.add(r.body.position);
    if (b.seen[b.seen.length - 1] !== r.body.status) b.seen.push(r.body.status);
    const wait = Math.min(Number(r.headers['retry-after'] ?? 1) * 1000, o.longestWaitMs ?? 2000);
    if (r.body.status === 'admitted' && b.part !== 'ignore admission' && b.orderId === undefined) {
      await order(url, o.productId, b, r.body.admission);
      due.set(b, Date.now() + (b.orderId === undefined ? 300 : wait));
      return;
    }
    if (r.body.status === 'ordered' || r.body.status === 'ended') b.done = true;
    due.set(b, Date.now() + wait);
  };
  const workers = Array.from({ length: o.inFlight }, async () => {
    while (Date.now() < deadline && !o.finished()) {
      let next: Buyer | undefined;
      let at = Infinity;
      for (const [b, t] of due) if (!b.done && t < at) [next, at] = [b, t];
      if (next === undefined) return;
      if (at > Date.now()) {
        await sleep(Math.min(at - Date.now(), 50));
        continue;
      }
      due.set(next, Infinity);
      await one(next);
    }
  });
  await Promise.all(workers);
}

async function order(url: string, productId: number, b: Buyer, admission: string): Promise<void> {
  const r = await request(url, 'POST', '/orders', { userId: b.userId, productId, admission }).catch(() => null);
  if (r === null) return;
  b.orderReplies.push(r);
  if (r.status !== 201) return;
  b.orderId = r.body.id;
  if (b.part === 'pay') {
    const p = await request(url, 'POST', `/orders/${b.orderId}/pay`, { userId: b.userId }, shop);
    b.paid = p.status === 200;
  } else if (b.part === 'cancel') {
    const c = await request(url, 'POST', `/orders/${b.orderId}/cancel`, { userId: b.userId }, shop);
    b.cancelled = c.status === 200;
  }
}

export function newBuyer(userId: string, part: Part): Buyer {
  return {
    userId,
    part,
    seen: [],
    polls: 0,
    orderReplies: [],
    done: false,
    positions: new Set(),
    admittedAt: new Set(),
    rejoined: 0,
    refusals: new Map(),
  };
}

/** The lottery as the fairness record describes it, recomputed here from the seed and the ticket ids. */
export function recomputeLottery(seedHex: string, ticketIds: string[]): string[] {
  const seed = Buffer.from(seedHex, 'hex');
  const keyed = ticketIds.map((id) => ({ id, k: hmac(seed, id) }));
  keyed.sort((a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : a.id < b.id ? -1 : 1));
  return keyed.map((t) => t.id);
}

// Written from the published description, apart from the service's own code.
function hmac(seed: Buffer, id: string): string {
  return createHmac('sha256', seed).update(id, 'ascii').digest('hex');
}

export const sha256Hex = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

/** An admission_batches row as the specs read it, as the harness's order rule takes it. */
export function stepOf(row: {
  first: number;
  last: number;
  admitted_at: Date;
  units_left: number;
  outstanding_before: number;
}): AdmissionStep {
  return {
    first: row.first,
    last: row.last,
    admittedAt: row.admitted_at.getTime(),
    unitsLeft: row.units_left,
    outstandingBefore: row.outstanding_before,
  };
}

export interface AdmissionBooks {
  batches: Array<{
    first: number;
    last: number;
    admitted_at: Date;
    expires_at: Date;
    units_left: number;
    outstanding_before: number;
  }>;
  orders: Array<{ id: number; user_id: string; status: string; position: number | null; created_at: Date }>;
}

/**
 * I8 from PostgreSQL: admission batches contiguous from position 1 and made in position order,
 * each within the ratio when made; no position admitted to two users (as the buyers saw it); every
 * order of the product spent the admission of a position its own user was admitted at, before that
 * admission expired; no position spent twice.
 */
export async function expectAdmissionsKept(
  productId: number,
  ratio: number,
  buyers: Buyer[],
  db: (work: (c: import('pg').Client) => Promise<AdmissionBooks>) => Promise<AdmissionBooks>,
): Promise<AdmissionBooks> {
  const books = await db(async (c) => ({
    batches: (
      await c.query(
        `SELECT first_position::int AS first, last_position::int AS last, admitted_at, expires_at, units_left, outstanding_before
           FROM admission_batches WHERE product_id = $1 ORDER BY first_position`,
        [productId],
      )
    ).rows,
    orders: (
      await c.query(
        `SELECT id::int, user_id, status, admission_position::int AS position, created_at FROM orders WHERE product_id = $1`,
        [productId],
      )
    ).rows,
  }));
  const { batches, orders } = books;
  expect(admissionStepProblems(batches.map(stepOf), ratio)).toEqual([]);
  // No position was admitted to two users.
  const holder = new Map<number, string>();
  for (const b of buyers)
    for (const p of b.admittedAt) {
      expect({ position: p, user: holder.get(p) ?? b.userId }).toEqual({ position: p, user: b.userId });
      holder.set(p, b.userId);
    }
  for (const o of orders) {
    expect(o.position).not.toBeNull();
    expect({ order: o.id, user: holder.get(o.position as number) }).toEqual({ order: o.id, user: o.user_id });
    const batch = batches.find((x) => x.first <= (o.position as number) && (o.position as number) <= x.last);
    expect(batch).toBeDefined();
    expect(o.created_at.getTime()).toBeLessThanOrEqual((batch as AdmissionBooks['batches'][0]).expires_at.getTime());
  }
  expect(new Set(orders.map((o) => o.position)).size).toBe(orders.length);
  return books;
}

export interface SaleState {
  /** Units left in the segments. */
  left: number;
  /** Orders still reserved (they may expire and give units back). */
  reserved: number;
  /** Orders ever placed. */
  orders: number;
}

/** Where a product's sale stands, read from PostgreSQL through `db`. */
export async function saleState(
  productId: number,
  db: <T>(work: (c: import('pg').Client) => Promise<T>) => Promise<T>,
): Promise<SaleState> {
  return db(async (c) => {
    const { rows } = await c.query(
      `SELECT (SELECT sum(stock) FROM stock_segments WHERE product_id = $1)::int AS left,
              (SELECT count(*) FROM orders WHERE product_id = $1 AND status = 'reserved')::int AS reserved,
              (SELECT count(*) FROM orders WHERE product_id = $1)::int AS orders`,
      [productId],
    );
    return rows[0] as SaleState;
  });
}

/**
 * A watch on a sale: once `watch()` is called it reads the sale every 300 ms until every unit is
 * ordered and no reservation is left to expire (all paid); `settled()` turns true then, and the
 * promise `watch()` returned resolves. It fails, saying where the sale stood, when the sale has not
 * moved (units left, reservations and orders all unchanged) for `stalledMs`: a busy machine makes a
 * sale slow, not still.
 */
export function saleWatch(
  read: () => Promise<SaleState>,
  stalledMs = 60_000,
): { settled: () => boolean; watch: () => Promise<void> } {
  let settled = false;
  const watch = async () => {
    let last = '';
    let movedAt = Date.now();
    // Inside the jest timeout of the specs that run a crowd, like the crowd itself: a watch left
    // running past its spec would read the next spec's database.
    const guard = Date.now() + CROWD_GUARD_MS;
    while (!settled) {
      await sleep(300);
      const s = await read();
      settled = s.left === 0 && s.reserved === 0;
      const now = JSON.stringify(s);
      if (now !== last) [last, movedAt] = [now, Date.now()];
      if (!settled && Date.now() - movedAt > stalledMs)
        throw new Error(`the sale stopped moving for ${stalledMs} ms: ${now}`);
      if (!settled && Date.now() > guard)
        throw new Error(`the sale did not settle within ${CROWD_GUARD_MS} ms: ${now}`);
    }
  };
  return { settled: () => settled, watch };
}

/**
 * Opens a waiting-room sale now (PATCH startsAt), then waits until every process answers a
 * pre-queue ticket with its drawn place. A spec makes its product start far ahead and calls this
 * once its pre-queue has joined: the spec, not a guess of how long the joins take on a busy
 * machine, decides when the pre-queue closes.
 */
export async function openSaleNow(urls: string[], productId: number, preQueueTicket: string): Promise<void> {
  const opened = await request(
    urls[0],
    'PATCH',
    `/admin/products/${productId}`,
    { startsAt: new Date().toISOString() },
    admin,
  );
  if (opened.status !== 200) throw new Error(`PATCH startsAt answered ${opened.status}`);
  for (const url of urls)
    await waitFor(
      `${url} to tell the pre-queue's draw`,
      async () => (await request(url, 'GET', `/products/${productId}/queue/${preQueueTicket}`)).body?.position != null,
      60_000,
      50,
    );
}

/** The room's pause mark: when its admission clocks stopped, null while they run. */
export async function pausedSince(productId: number): Promise<Date | null> {
  return withDb(
    async (db) =>
      (await db.query('SELECT paused_since FROM waiting_rooms WHERE product_id = $1', [productId])).rows[0]
        .paused_since as Date | null,
  );
}

/**
 * Moves a paused room's clock back instead of waiting: its admissions made 70 s ago for 30 s, the
 * pause 60 s ago with 20 s of them left, so by the clock they ran out 40 s ago, during the pause.
 */
export async function pauseLongAgo(productId: number): Promise<void> {
  await withDb(async (db) => {
    await db.query(`UPDATE waiting_rooms SET paused_since = now() - interval '60 seconds' WHERE product_id = $1`, [
      productId,
    ]);
    await db.query(
      `UPDATE admission_batches SET admitted_at = now() - interval '70 seconds', expires_at = now() - interval '40 seconds'
        WHERE product_id = $1`,
      [productId],
    );
  });
}
