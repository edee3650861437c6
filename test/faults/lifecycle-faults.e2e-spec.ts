// Faults during an order's life (reserved, then paid, cancelled or expired), against this spec's own
// PostgreSQL and Redis and two service processes that both sweep for expired reservations.
// I6: the units of an expired or cancelled order come back exactly once, whichever process gets
// there, through a sweeper killed mid-transaction (SIGKILL), a Redis FLUSHALL and a PostgreSQL
// crash; the returned units then sell again (no stale sold-out flag hides them, I3, also when the
// FLUSHALL falls between an order's sold-out decision and its mark).
// I7: pay and cancel answers are the truth while PostgreSQL crashes and freezes under concurrent
// pay/cancel load: 200 means done, 409 names the winner, BUSY/UNAVAILABLE mean nothing changed,
// OUTCOME_UNKNOWN is settled by retrying the same call; a cancel whose session PostgreSQL ends
// mid-transaction is answered 503 UNAVAILABLE, not 500.
//
// Process b reaches PostgreSQL and Redis through stalling proxies (transparent until armed), so a
// test can hold one of its statements or Redis commands at a chosen point: the sweep of b is held
// after it put units back and before it marks the orders expired, and then b (or PostgreSQL) dies.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { auditProduct, Audit } from '../../harness/verify';
import { hintKeys } from '../../src/infrastructure/redis-keys';
import { admin, pooled, request, ServiceProcess, shop } from '../support/service';
import {
  brief,
  crashAndFreezeCycles,
  crashPostgres,
  FaultPostgres,
  FaultRedis,
  Outcome,
  placeOrder,
  scratchDir,
  StallingProxy,
  startFaultService,
  stopAll,
  withPg,
} from './support';
import { sleep, waitFor } from '../support/wait';

const DB_TIMEOUT_MS = 800;
const LOCK_WAIT_MS = 400;
const EXPIRY_SWEEP_MS = 100;
const CYCLES = 8;
/**
 * Longest a pay or cancel may take while PostgreSQL is frozen: a wait for a pool connection
 * (connectionTimeoutMillis = DB_TIMEOUT_MS), a statement that meets the client-side query timeout
 * (DB_TIMEOUT_MS + 1 s), then either the ROLLBACK queued behind it meeting the same timeout or
 * settling the outcome of a lost COMMIT (DB_TIMEOUT_MS); plus slack for a busy 2-core machine.
 */
const REPLY_BOUND_MS = DB_TIMEOUT_MS + 2 * (DB_TIMEOUT_MS + 1000) + 1500;
/** The sweep's last statement before COMMIT: once it is held, the units are back in the segments, uncommitted. */
const EXPIRE_STATEMENT = "SET status = 'expired'";
/** What the held sweep ran last: returnUnits's UPDATE of the segments. */
const RETURN_STATEMENT = 'stock = s.stock + v.q';
/** Re-arms a proxy with bytes no client sends: an armed stall that never fired must not fire in a later test. */
const disarm = (proxy: StallingProxy) => void proxy.stallNext('\u0000never sent\u0000', 0);

interface ProductView {
  id: number;
  stocked: number;
  segments: Array<{ index: number; stock: number }>;
}

interface OrderState {
  id: number;
  userId: string;
  status: 'reserved' | 'paid' | 'cancelled' | 'expired';
  allocations: Array<{ segment: number; quantity: number }>;
  /** paid_at / closed_at in epoch ms (PostgreSQL's clock, the same host's as the test's). */
  paidMs: number | null;
  closedMs: number | null;
}

interface Books {
  audit: Audit;
  segments: Array<{ index: number; stock: number }>;
  orders: Map<number, OrderState>;
}

/** One pay or cancel as the client saw it. */
interface Call {
  op: 'pay' | 'cancel';
  orderId: number;
  userId: string;
  target: string;
  sentAt: number;
  doneAt: number;
  status: number; // 0: no HTTP reply
  code?: string;
  retryAfter?: string;
  body?: any;
  error?: string;
}

const describeCall = (c: Call) =>
  `${c.op} #${c.orderId} -> ${c.target}: ${c.status} ${c.code ?? c.error ?? ''} in ${c.doneAt - c.sentAt} ms`;

function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

describe('Order lifecycle under faults: expiry, pay and cancel across two processes', () => {
  const scratch = scratchDir('lifecycle');
  let pg: FaultPostgres;
  let redis: FaultRedis;
  let pgProxy: StallingProxy;
  let redisProxy: StallingProxy;
  let a: ServiceProcess;
  let b: ServiceProcess;
  const env = {
    DB_TIMEOUT_MS: String(DB_TIMEOUT_MS),
    LOCK_WAIT_MS: String(LOCK_WAIT_MS),
    EXPIRY_SWEEP_MS: String(EXPIRY_SWEEP_MS),
    LOG_LEVEL: 'error',
  };
  const startB = () =>
    startFaultService(pg, redis, {
      ...env,
      DATABASE_URL: pg.urlAt(pgProxy.port),
      REDIS_URL: `redis://127.0.0.1:${redisProxy.port}`,
    });

  beforeAll(async () => {
    [pg, redis] = await Promise.all([FaultPostgres.start(join(scratch.dir, 'pg')), FaultRedis.start()]);
    [pgProxy, redisProxy] = await Promise.all([StallingProxy.start(pg.port), StallingProxy.start(redis.port)]);
    // One at a time: both would run the migrations at once (they take an advisory lock, but the
    // second start then waits on the first on a 2-core machine anyway).
    a = await startFaultService(pg, redis, env);
    b = await startB();
  }, 120_000);
  afterAll(async () => {
    await stopAll(
      () => a?.stop(),
      () => b?.stop(),
      () => pgProxy?.stop(),
      () => redisProxy?.stop(),
      () => redis?.stop(),
      () => pg?.stop(),
    );
    scratch.cleanup();
  });

  async function createProduct(body: {
    stock: number;
    segments: number;
    paymentTimeoutS: number;
  }): Promise<ProductView> {
    const r = await request(a.url, 'POST', '/admin/products', { name: 'lifecycle', ...body }, admin);
    if (r.status !== 201) throw new Error(`create product: ${r.status} ${r.text}`);
    return r.body as ProductView;
  }

  const users = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

  /**
   * One order per user, alternating between the two processes. A 503 BUSY or UNAVAILABLE changed
   * nothing (every segment stayed locked for LOCK_WAIT_MS, or a statement ran past DB_TIMEOUT_MS:
   * both short here, which a loaded machine can reach): the buyer asks again, as a client does, a
   * few times. (Had it changed something, the next answer would be 409 ALREADY_ORDERED, and fail
   * the spec's check that every order was made.)
   */
  const reserve = (productId: number, userIds: string[]): Promise<Outcome[]> =>
    pooled(
      userIds.map((u, i) => async () => {
        // A failure shows the answers before the last (brief): a 409 after a 503 is not a 409 alone.
        const before: string[] = [];
        for (let attempt = 1; ; attempt++) {
          const o = await placeOrder(i % 2 === 0 ? a.url : b.url, u, productId);
          if (!(o.status === 503 && ['BUSY', 'UNAVAILABLE'].includes(o.code as string)) || attempt === 10)
            return before.length > 0 ? { ...o, before } : o;
          before.push(`${o.status} ${o.code} in ${o.doneAt - o.sentAt} ms`);
          await sleep(100);
        }
      }),
      16,
    );

  /** Stock, segments and every order of the product, from one snapshot. */
  async function books(productId: number): Promise<Books> {
    return withPg(pg.url, async (db) => {
      await db.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      try {
        const audit = await auditProduct(db, productId);
        const segs = await db.query(
          'SELECT idx, stock::bigint AS stock FROM stock_segments WHERE product_id = $1 ORDER BY idx',
          [productId],
        );
        const orders = await db.query(
          `SELECT id::bigint AS id, user_id, status, allocations,
                  (extract(epoch FROM paid_at) * 1000)::float8 AS paid_ms, (extract(epoch FROM closed_at) * 1000)::float8 AS closed_ms
             FROM orders WHERE product_id = $1`,
          [productId],
        );
        return {
          audit,
          segments: segs.rows.map((s) => ({ index: s.idx, stock: Number(s.stock) })),
          orders: new Map(
            orders.rows.map((o): [number, OrderState] => [
              Number(o.id),
              {
                id: Number(o.id),
                userId: o.user_id,
                status: o.status,
                allocations: o.allocations,
                paidMs: o.paid_ms,
                closedMs: o.closed_ms,
              },
            ]),
          ),
        };
      } finally {
        await db.query('COMMIT');
      }
    });
  }

  const statusCounts = async (productId: number): Promise<Record<string, number>> =>
    withPg(pg.url, async (db) => {
      const r = await db.query('SELECT status, count(*)::int AS n FROM orders WHERE product_id = $1 GROUP BY status', [
        productId,
      ]);
      return Object.fromEntries(r.rows.map((row) => [row.status, row.n]));
    });

  /**
   * I1 and I6 per segment: every segment holds what it was created with minus the units of the live
   * orders taken from it. A unit returned twice, or not at all, shows in its own segment.
   */
  function expectUnitsBackExactlyOnce(product: ProductView, now: Books): void {
    expect(now.audit.negativeSegments).toBe(0);
    expect(now.audit.totalStock).toBe(product.stocked);
    expect(now.audit.remaining + now.audit.ordered).toBe(now.audit.totalStock);
    expect(now.audit.duplicateUsers).toBe(0);
    const held = new Map<number, number>();
    for (const o of now.orders.values()) {
      if (o.status !== 'reserved' && o.status !== 'paid') continue;
      for (const al of o.allocations) held.set(al.segment, (held.get(al.segment) ?? 0) + al.quantity);
    }
    expect(now.segments).toEqual(
      product.segments.map((s) => ({ index: s.index, stock: s.stock - (held.get(s.index) ?? 0) })),
    );
  }

  /**
   * Holds b's next sweep that expires anything after it put the units back (the held UPDATE marks
   * the orders expired), and resolves once PostgreSQL shows that transaction open, so that the
   * caller can kill what it likes under it; then the product's other reservations fall due, for the
   * sweeps that come after. The reservations are made with an hour to pay, so that the burst that
   * makes them may take as long as a loaded machine needs: here they fall due a slice at a time,
   * their deadlines set in PostgreSQL, each slice swept by whichever process sweeps first, until b
   * takes one. Asked on a connection opened beforehand: the server ends the held session itself
   * after idle_in_transaction_session_timeout (2 x DB_TIMEOUT_MS).
   */
  async function holdSweepOfB(productId: number): Promise<void> {
    const db = new Client({ connectionString: pg.url });
    await db.connect();
    // A slice (null: all) of the reservations not yet due falls due now; b's held rows are skipped.
    const fallDue = async (slice: number | null) =>
      (
        await db.query(
          `UPDATE orders SET expires_at = now() WHERE id IN (
             SELECT id FROM orders WHERE product_id = $1 AND status = 'reserved' AND expires_at > now()
              ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)`,
          [productId, slice],
        )
      ).rowCount ?? 0;
    try {
      const held = pgProxy.stallNext(EXPIRE_STATEMENT, 5000);
      let taken = false;
      void held.then(() => (taken = true));
      try {
        await waitFor(
          'a sweep of process b to expire reservations',
          async () => {
            if (taken) return true;
            if ((await fallDue(10)) === 0) throw new Error('every reservation fell due and a swept them all, b none');
            return false;
          },
          60_000,
          300,
        );
      } finally {
        disarm(pgProxy);
      }
      await waitFor(
        "b's sweep transaction open with the units put back",
        async () => {
          const r = await db.query(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'idle in transaction' AND query LIKE $1`,
            [`%${RETURN_STATEMENT}%`],
          );
          return r.rows[0].n > 0;
        },
        1000,
        5,
      );
      await fallDue(null);
    } finally {
      await db.end();
    }
  }

  const allExpired = (productId: number, total: number) =>
    waitFor(
      `all ${total} reservations expired`,
      async () => {
        const s = await statusCounts(productId);
        return (s.expired ?? 0) === total && Object.keys(s).length === 1;
      },
      20_000,
      50,
    );

  it('should return the units of every expired reservation exactly once when a process is SIGKILLed in the middle of its sweep', async () => {
    const product = await createProduct({ stock: 400, segments: 16, paymentTimeoutS: 3600 });
    const outcomes = await reserve(product.id, users('ka', 400));
    expect(outcomes.filter((o) => o.status !== 201).map(brief)).toEqual([]);
    const sold = outcomes.length;
    // They fall due: b's first sweep that expires any is held after it put their units back, with
    // the orders locked and not yet marked expired.
    await holdSweepOfB(product.id);
    const before = await statusCounts(product.id);
    expect(before.reserved ?? 0).toBeGreaterThan(0); // expiry in progress
    await b.stop('SIGKILL');

    // a sweeps on alone; b's transaction died with it, so its orders are found again.
    await allExpired(product.id, sold);
    const after = await books(product.id);
    expect(after.orders.size).toBe(sold);
    expect([...after.orders.values()].filter((o) => o.status !== 'expired' || o.closedMs === null)).toEqual([]);
    expect(after.audit).toMatchObject({ orders: 0, ordered: 0, remaining: 400 });
    expectUnitsBackExactlyOnce(product, after);

    b = await startB();
  });

  it('should return every unit once through a Redis FLUSHALL in the middle of expiry, and sell the returned units again although the product was sold out', async () => {
    const STOCK = 120;
    // Two waves that fall due one after the other (their deadlines set here, in PostgreSQL, so the
    // waves may take as long as they take): the first expires, then Redis loses everything, then the second.
    const product = await createProduct({ stock: STOCK, segments: 6, paymentTimeoutS: 3600 });
    const dueNow = (orders: Array<{ orderId?: number }>) =>
      withPg(pg.url, (db) =>
        db.query(`UPDATE orders SET expires_at = now() WHERE id = ANY($1::bigint[]) AND status = 'reserved'`, [
          orders.map((o) => o.orderId),
        ]),
      );
    const first = await reserve(product.id, users('fa', STOCK / 2));
    const second = await reserve(product.id, users('fb', STOCK / 2));
    expect([...first, ...second].filter((o) => o.status !== 201).map(brief)).toEqual([]);
    // Sold out: later buyers are refused on both processes, and the sold-out flag is up.
    const late = await Promise.all([placeOrder(a.url, 'fl-0', product.id), placeOrder(b.url, 'fl-1', product.id)]);
    expect(late.map((o) => `${o.status} ${o.code}`)).toEqual(['410 SOLD_OUT', '410 SOLD_OUT']);
    expect(await redis.with((r) => r.exists(hintKeys.soldOut(product.id)))).toBe(1);
    const secondIds = new Set(second.map((o) => o.orderId));

    expect((await dueNow(first)).rowCount).toBe(STOCK / 2);
    await waitFor(
      'the first wave expired',
      async () => {
        const b1 = await books(product.id);
        return [...b1.orders.values()].filter((o) => o.status === 'expired').length >= STOCK / 2;
      },
      15_000,
      20,
    );
    const mid = await books(product.id);
    const secondStill = [...mid.orders.values()].filter((o) => secondIds.has(o.id) && o.status === 'reserved').length;
    await redis.with((r) => r.flushall());
    expect(secondStill).toBe(STOCK / 2); // the flush came in the middle of expiry

    expect((await dueNow(second)).rowCount).toBe(STOCK / 2);
    await allExpired(product.id, STOCK);
    const expired = await books(product.id);
    expect(expired.audit).toMatchObject({ orders: 0, ordered: 0, remaining: STOCK });
    expectUnitsBackExactlyOnce(product, expired);

    // Every returned unit sells again, on both processes, and only then is the product sold out.
    const again = await reserve(product.id, users('fc', STOCK));
    expect(again.filter((o) => o.status !== 201).map(brief)).toEqual([]);
    expect(await placeOrder(b.url, 'fc-late', product.id)).toMatchObject({ status: 410, code: 'SOLD_OUT' });
    const resold = await books(product.id);
    expect(resold.audit).toMatchObject({ orders: STOCK, ordered: STOCK, remaining: 0 });
    expectUnitsBackExactlyOnce(product, resold);
  });

  it('should not let a sold-out mark decided before a FLUSHALL hide a unit returned meanwhile', async () => {
    // The stock generation guards the sold-out flag: an order that saw 0 units left may only set it if
    // no units came back since it read the generation. A FLUSHALL resets the generation; it must not
    // make an older reading current again.
    const product = await createProduct({ stock: 1, segments: 1, paymentTimeoutS: 3600 });
    const markSoldOut = readFileSync(join(__dirname, '..', '..', 'lua', 'mark-sold-out-2.lua'), 'utf8');
    const sha = createHash('sha1').update(markSoldOut).digest('hex');
    // Loaded, so that the held EVALSHA needs no EVAL fallback after its client timed out.
    await redis.with((r) => r.script('LOAD', markSoldOut));

    const holder = await placeOrder(a.url, 'g-holder', product.id);
    expect(holder.status).toBe(201);
    // b learns from PostgreSQL that nothing is left; its sold-out mark is held on the way to Redis.
    const markHeld = redisProxy.stallNext(sha, 1500);
    let refused = placeOrder(b.url, 'g-refused', product.id);
    let heldAt: number;
    try {
      // On a loaded machine the order may meet its segment still locked past LOCK_WAIT_MS (503
      // BUSY: nothing happened) before it reaches PostgreSQL: it is sent again, as a client would.
      for (let attempt = 1; attempt < 10; attempt++) {
        const first = await Promise.race([markHeld.then(() => null), refused]);
        if (first === null || !(first.status === 503 && first.code === 'BUSY')) break;
        refused = placeOrder(b.url, 'g-refused', product.id);
      }
      heldAt = await within(markHeld, 30_000, "b's sold-out mark");
    } finally {
      disarm(redisProxy);
    }
    // Meanwhile the unit comes back (a cancel on a), and Redis loses everything.
    const cancel = await request(a.url, 'POST', `/orders/${holder.orderId}/cancel`, { userId: 'g-holder' }, shop);
    expect(cancel.status).toBe(200);
    await redis.with((r) => r.flushall());
    expect(await refused).toMatchObject({ status: 410, code: 'SOLD_OUT' }); // true when PostgreSQL was asked

    // Once the held mark has reached Redis (b's next command on that connection is answered after it)...
    await waitFor('the held mark to be released', () => Date.now() - heldAt >= 1600);
    expect((await request(b.url, 'GET', '/health')).status).toBe(200);
    // ...the unit that came back still sells.
    expect((await books(product.id)).audit).toMatchObject({ remaining: 1, orders: 0 });
    const buyer = await placeOrder(a.url, 'g-buyer', product.id);
    expect(`${buyer.status} ${buyer.code ?? ''}`.trim()).toBe('201');
    expectUnitsBackExactlyOnce(product, await books(product.id));
  });

  it('should return every expired unit exactly once when PostgreSQL is stopped (immediate) and started while reservations expire', async () => {
    const product = await createProduct({ stock: 300, segments: 10, paymentTimeoutS: 3600 });
    const outcomes = await reserve(product.id, users('pc', 300));
    expect(outcomes.filter((o) => o.status !== 201).map(brief)).toEqual([]);
    const sold = outcomes.length;
    await holdSweepOfB(product.id);
    expect((await statusCounts(product.id)).reserved ?? 0).toBeGreaterThan(0);

    // Immediate shutdown: no session is told; b's sweep (units put back, orders not yet expired)
    // and whatever a was sweeping are cut off.
    await crashPostgres(pg);
    await sleep(300);
    await pg.start();

    await allExpired(product.id, sold);
    const after = await books(product.id);
    expect(after.orders.size).toBe(sold);
    expect(after.audit).toMatchObject({ orders: 0, ordered: 0, remaining: 300 });
    expectUnitsBackExactlyOnce(product, after);
    // Both processes serve again.
    expect((await placeOrder(a.url, 'pc-after-a', product.id)).status).toBe(201);
    expect((await placeOrder(b.url, 'pc-after-b', product.id)).status).toBe(201);
  });

  it('should answer 503 UNAVAILABLE and change nothing when PostgreSQL ends a cancel mid-transaction (idle in transaction past its timeout)', async () => {
    // A stall between b and PostgreSQL after the cancel put the units back: the server, which sees
    // the session idle in its transaction, ends it after idle_in_transaction_session_timeout
    // (2 x DB_TIMEOUT_MS) with a FATAL; the transaction is rolled back.
    const product = await createProduct({ stock: 4, segments: 2, paymentTimeoutS: 3600 });
    const order = await placeOrder(a.url, 'idle-1', product.id);
    expect(order.status).toBe(201);
    const held = pgProxy.stallNext("SET status = 'cancelled'", 2 * DB_TIMEOUT_MS + 500);
    const sentAt = Date.now();
    const cancel = request(b.url, 'POST', `/orders/${order.orderId}/cancel`, { userId: 'idle-1' }, shop);
    try {
      await within(held, 10_000, "b's cancel to reach its UPDATE");
    } finally {
      disarm(pgProxy);
    }
    const reply = await cancel;
    expect({ status: reply.status, code: reply.body?.code, retryAfter: reply.headers['retry-after'] }).toEqual({
      status: 503,
      code: 'UNAVAILABLE',
      retryAfter: '1',
    });
    expect(Date.now() - sentAt).toBeLessThan(REPLY_BOUND_MS);
    // Nothing happened: still reserved, its unit not put back.
    const after = await books(product.id);
    expect(after.orders.get(order.orderId as number)?.status).toBe('reserved');
    expectUnitsBackExactlyOnce(product, after);
    // The same call again does it.
    const again = await request(b.url, 'POST', `/orders/${order.orderId}/cancel`, { userId: 'idle-1' }, shop);
    expect({ status: again.status, body: again.body?.status }).toEqual({ status: 200, body: 'cancelled' });
    const done = await books(product.id);
    expect(done.audit).toMatchObject({ orders: 0, remaining: 4 });
    expectUnitsBackExactlyOnce(product, done);
  });

  it(`should answer pay and cancel with the truth while PostgreSQL is stopped (immediate) and frozen, ${CYCLES} times, under load from two processes`, async () => {
    const ORDERS = 600;
    const product = await createProduct({ stock: ORDERS, segments: 16, paymentTimeoutS: 3600 });
    const made = await reserve(product.id, users('t', ORDERS));
    expect(made.filter((o) => o.status !== 201).map(brief)).toEqual([]);
    const orders = made.map((o) => ({ id: o.orderId as number, userId: o.userId }));

    const change = async (base: string, op: 'pay' | 'cancel', o: { id: number; userId: string }): Promise<Call> => {
      const sentAt = Date.now();
      const call = { op, orderId: o.id, userId: o.userId, target: base, sentAt };
      try {
        const r = await request(base, 'POST', `/orders/${o.id}/${op}`, { userId: o.userId }, shop);
        return {
          ...call,
          doneAt: Date.now(),
          status: r.status,
          code: r.body?.code,
          retryAfter: r.headers['retry-after'],
          body: r.body,
        };
      } catch (err) {
        return {
          ...call,
          doneAt: Date.now(),
          status: 0,
          error: (err as NodeJS.ErrnoException).code ?? (err as Error).message,
        };
      }
    };

    // Load: each loop takes a fresh order half the time (else one already touched: repeats and
    // conflicting calls), and now and then races a pay on one process against a cancel on the other.
    const calls: Call[] = [];
    const fresh = [...orders].sort(() => Math.random() - 0.5);
    const touched: typeof orders = [];
    let running = true;
    const pick = () => {
      const o =
        fresh.length > 0 && (touched.length === 0 || Math.random() < 0.5)
          ? (fresh.pop() as (typeof orders)[number])
          : touched[Math.floor(Math.random() * touched.length)];
      if (!touched.includes(o)) touched.push(o);
      return o;
    };
    const loops = Array.from({ length: 12 }, async (_, loop) => {
      while (running) {
        const o = pick();
        const [one, other] = Math.random() < 0.5 ? [a.url, b.url] : [b.url, a.url];
        if (Math.random() < 0.2) {
          calls.push(...(await Promise.all([change(one, 'pay', o), change(other, 'cancel', o)])));
        } else {
          calls.push(await change(loop % 2 === 0 ? one : other, Math.random() < 0.5 ? 'pay' : 'cancel', o));
        }
        await sleep(15);
      }
    });
    const answeredSince = (from: number) =>
      calls.filter((c) => c.sentAt >= from && (c.status === 200 || c.status === 409)).length;

    await crashAndFreezeCycles(pg, {
      cycles: CYCLES,
      freezeMs: DB_TIMEOUT_MS + 700,
      what: 'pay and cancel answered',
      progress: answeredSince,
    });
    running = false;
    await Promise.all(loops);
    // Statements that outlived their callers' timeouts have ended (none is still running).
    await waitFor('no order write still running', () =>
      withPg(pg.url, async (db) => {
        const r = await db.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE state <> 'idle' AND query LIKE '/* order-write%'`,
        );
        return r.rows[0].n === 0;
      }),
    );

    // Never a hang, never a 500: 200, the 409 that names the winner, or a 503 with Retry-After.
    expect(calls.filter((c) => c.status === 0 || c.doneAt - c.sentAt > REPLY_BOUND_MS).map(describeCall)).toEqual([]);
    const allowed = (c: Call) =>
      c.status === 200 ||
      (c.status === 409 && c.code === (c.op === 'pay' ? 'ORDER_CANCELLED' : 'ORDER_PAID')) ||
      (c.status === 503 &&
        ['UNAVAILABLE', 'BUSY', 'OUTCOME_UNKNOWN'].includes(c.code as string) &&
        c.retryAfter === '1');
    expect(calls.filter((c) => !allowed(c)).map(describeCall)).toEqual([]);
    // The faults were felt.
    expect(calls.filter((c) => c.status === 503).length).toBeGreaterThanOrEqual(CYCLES * 5);

    const end = await books(product.id);
    expect(end.orders.size).toBe(ORDERS);
    const byOrder = new Map<number, Call[]>();
    for (const c of calls) byOrder.set(c.orderId, [...(byOrder.get(c.orderId) ?? []), c]);
    const SLACK_MS = 5;
    const problems: string[] = [];
    for (const [id, cs] of byOrder) {
      const o = end.orders.get(id) as OrderState;
      const story = () => `order #${id} ended ${o.status}; calls: ${cs.map(describeCall).join('; ')}`;
      for (const c of cs) {
        // A 200 is the order's state in PostgreSQL, the same instant of payment or cancellation.
        if (
          c.status === 200 &&
          c.op === 'pay' &&
          !(
            o.status === 'paid' &&
            c.body?.status === 'paid' &&
            Math.abs(Date.parse(c.body.paidAt) - (o.paidMs as number)) < 1.5
          )
        )
          problems.push(`pay answered 200 but: ${story()}`);
        if (
          c.status === 200 &&
          c.op === 'cancel' &&
          !(
            o.status === 'cancelled' &&
            c.body?.status === 'cancelled' &&
            Math.abs(Date.parse(c.body.closedAt) - (o.closedMs as number)) < 1.5
          )
        )
          problems.push(`cancel answered 200 but: ${story()}`);
        // A 409 names the winner.
        if (c.status === 409 && o.status !== (c.op === 'pay' ? 'cancelled' : 'paid'))
          problems.push(`${c.op} answered ${c.code} but: ${story()}`);
      }
      // The change that happened was made by a call that was told 200 (in its window) or
      // OUTCOME_UNKNOWN (sent before it): never by one told BUSY or UNAVAILABLE.
      const madeBy = (op: 'pay' | 'cancel', at: number | null) =>
        at !== null &&
        cs.some(
          (c) =>
            c.op === op &&
            (c.status === 200 || c.code === 'OUTCOME_UNKNOWN') &&
            c.sentAt - SLACK_MS <= at &&
            (c.status !== 200 || at <= c.doneAt + SLACK_MS),
        );
      if (o.status === 'paid' && !madeBy('pay', o.paidMs))
        problems.push(`paid by no call told 200 or OUTCOME_UNKNOWN: ${story()}`);
      if (o.status === 'cancelled' && !madeBy('cancel', o.closedMs))
        problems.push(`cancelled by no call told 200 or OUTCOME_UNKNOWN: ${story()}`);
      if (o.status === 'expired') problems.push(`expired with a timeout of an hour: ${story()}`);
    }
    // Orders nobody called stayed reserved.
    for (const o of end.orders.values())
      if (!byOrder.has(o.id) && o.status !== 'reserved') problems.push(`order #${o.id} untouched but ${o.status}`);
    expect(problems).toEqual([]);
    // Every cancelled order's units are back, once, in their segments.
    expectUnitsBackExactlyOnce(product, end);
    const finals = [...end.orders.values()];
    expect(finals.filter((o) => o.status === 'paid').length).toBeGreaterThanOrEqual(CYCLES);
    expect(finals.filter((o) => o.status === 'cancelled').length).toBeGreaterThanOrEqual(CYCLES);

    // OUTCOME_UNKNOWN: retrying the same call now tells the truth, and PostgreSQL agrees.
    const unknown = calls.filter((c) => c.code === 'OUTCOME_UNKNOWN');
    for (const c of unknown) {
      const before = (await books(product.id)).orders.get(c.orderId) as OrderState;
      const retry = await change(a.url, c.op, { id: c.orderId, userId: c.userId });
      const now = (await books(product.id)).orders.get(c.orderId) as OrderState;
      const target = c.op === 'pay' ? 'paid' : 'cancelled';
      const loser = c.op === 'pay' ? 'cancelled' : 'paid';
      if (before.status === target) {
        // It took effect (then or through another call): 200, unchanged.
        expect({
          status: retry.status,
          body: retry.body?.status,
          now: now.status,
          same: now.paidMs === before.paidMs && now.closedMs === before.closedMs,
        }).toEqual({
          status: 200,
          body: target,
          now: target,
          same: true,
        });
      } else if (before.status === loser) {
        expect({ status: retry.status, code: retry.code, now: now.status }).toEqual({
          status: 409,
          code: c.op === 'pay' ? 'ORDER_CANCELLED' : 'ORDER_PAID',
          now: loser,
        });
      } else {
        // It did not take effect: the retry does it now.
        expect({ before: before.status, status: retry.status, body: retry.body?.status, now: now.status }).toEqual({
          before: 'reserved',
          status: 200,
          body: target,
          now: target,
        });
      }
    }
    expectUnitsBackExactlyOnce(product, await books(product.id));
  }, 240_000);
});
