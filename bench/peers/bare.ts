// The "bare" benchmark peer: the service's order algorithm (user lock, random segment, fall over, one
// SQL statement inside a Redlock segment lock, SOLD_OUT only after reading PostgreSQL) on plain
// node:http, ioredis and pg. STOCK_LOCKING=database drops the Redis locks (row locks only). Not here:
// the service's in-process lock hand-off, Redis hints, several segments for one order.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ExecutionError, Lock, Redlock, ResourceLockedError } from '@sesamecare-oss/redlock';
import type { Result } from 'ioredis';
import { projectRoot } from '../../src/infrastructure/project-root';
import { SCRIPTS, scriptFile } from '../../src/infrastructure/redis-scripts';
import { answer, created, env, HOLD_MS, memo, OrderRequest, peerPool, peerRedis, query, serve, sleep } from './common';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    peerReleaseUserLock(key: string, token: string): Result<number, Context>;
  }
}

const LOCK_TTL_MS = env('LOCK_TTL_MS', 2000);
const USER_LOCK_TTL_MS = env('USER_LOCK_TTL_MS', 15_000);
const LOCK_WAIT_MS = env('LOCK_WAIT_MS', 5000);
const RETRY_DELAY_MS = env('LOCK_RETRY_DELAY_MS', 4);
const RETRY_JITTER_MS = env('LOCK_RETRY_JITTER_MS', 8);
const retryDelay = () => RETRY_DELAY_MS + Math.floor(Math.random() * (RETRY_JITTER_MS + 1));

if (![undefined, 'redlock', 'database'].includes(process.env.STOCK_LOCKING))
  throw new Error(`STOCK_LOCKING must be redlock or database, not ${process.env.STOCK_LOCKING}`);
const pool = peerPool();
const redis = process.env.STOCK_LOCKING === 'database' ? null : peerRedis();
// The service's own script, found through its registry (file name and key count declared there once).
redis?.defineCommand('peerReleaseUserLock', {
  numberOfKeys: SCRIPTS.endOrder.keys as number,
  lua: readFileSync(join(projectRoot(__dirname), 'lua', scriptFile('endOrder')), 'utf8'),
});
const redlock = redis && new Redlock([redis], { retryCount: 0, driftFactor: 0.01 });

// The service's statement: deduct if the segment holds q, insert the order, report what is left.
// Without a Redis lock the row lock is the only lock, so the simulated work (`nap`) sleeps inside it.
const NAP = !redis && HOLD_MS > 0;
const TAKE_SQL = `
  WITH seg AS (
    UPDATE stock_segments SET stock = stock - $3::int WHERE product_id = $1 AND idx = $2 AND stock >= $3::int RETURNING idx, stock
  )${NAP ? `, nap AS (SELECT pg_sleep(${HOLD_MS / 1000}) FROM seg)` : ''}, ins AS (
    INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at)
    SELECT $1, $4, $3::int, jsonb_build_array(jsonb_build_object('segment', seg.idx, 'quantity', $3::int)), 'reserved',
           now() + make_interval(secs => (SELECT payment_timeout_s FROM products WHERE id = $1)) FROM seg${NAP ? ', nap' : ''}
    RETURNING id, created_at
  )
  SELECT ins.id, ins.created_at, COALESCE((SELECT stock FROM seg), (SELECT stock FROM stock_segments WHERE product_id = $1 AND idx = $2)) AS remaining
    FROM (SELECT 1) AS one LEFT JOIN ins ON true`;

interface Product {
  segments: number;
  limitPerUser: number;
  /** Segments seen empty; stock never comes back in a benchmark, and SOLD_OUT still reads PostgreSQL. */
  empty: Set<number>;
}
const products = memo((id): Promise<Product> =>
  query(
    pool,
    'SELECT limit_per_user, (SELECT count(*) FROM stock_segments WHERE product_id = $1)::int AS n FROM products WHERE id = $1',
    [id],
  ).then(({ rows }) => {
    if (rows.length === 0) throw answer.notFound(id);
    return { segments: rows[0].n as number, limitPerUser: rows[0].limit_per_user as number, empty: new Set() };
  }),
);

/** One attempt on one segment: the order, 'empty' (fall over) or 'busy' (locked elsewhere). */
async function attempt(p: Product, idx: number, req: OrderRequest): Promise<object | 'empty' | 'busy'> {
  let lock: Lock | null = null;
  if (redlock) {
    try {
      lock = await redlock.acquire([`lock:stock:${req.productId}:${idx}`], LOCK_TTL_MS);
    } catch (err) {
      const stats =
        err instanceof ExecutionError && err.attempts.length > 0 ? await err.attempts[err.attempts.length - 1] : null;
      if (stats && [...stats.votesAgainst.values()].every((e) => e instanceof ResourceLockedError)) return 'busy';
      throw answer.unavailable('redis');
    }
  }
  try {
    const { rows } = await query(pool, TAKE_SQL, [req.productId, idx, req.quantity, req.userId]);
    const row = rows[0] as { id: string | null; created_at: Date; remaining: string | null };
    if (row.remaining === null || Number(row.remaining) === 0) p.empty.add(idx);
    if (row.id === null) return 'empty';
    if (lock && HOLD_MS > 0) await sleep(HOLD_MS);
    return created(req, row.id, row.created_at, [{ segment: idx, quantity: req.quantity }]);
  } finally {
    // Not awaited, as in the service: the order needs nothing from the reply.
    if (lock) redlock!.release(lock).catch(() => undefined);
  }
}

/** Every segment once from a random one; then, while some were busy, one retry per jittered wait. */
async function trySegments(p: Product, req: OrderRequest, skip: ReadonlySet<number>): Promise<object | null> {
  const start = Math.floor(Math.random() * p.segments);
  const busyOnes: number[] = [];
  for (let k = 0; k < p.segments; k++) {
    const idx = (start + k) % p.segments;
    if (skip.has(idx)) continue;
    const out = await attempt(p, idx, req);
    if (out === 'busy') busyOnes.push(idx);
    else if (out !== 'empty') return out;
  }
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (let turn = 0; busyOnes.length > 0; turn++) {
    if (Date.now() >= deadline) throw answer.busy(`every segment with stock stayed locked for ${LOCK_WAIT_MS} ms`);
    await sleep(retryDelay());
    const i = turn % busyOnes.length;
    const out = await attempt(p, busyOnes[i], req);
    if (out === 'empty') busyOnes.splice(i, 1);
    else if (out !== 'busy') return out;
  }
  return null;
}

/** Segments first; when none sold, PostgreSQL says whether the stock is gone or which segments to retry. */
async function sell(req: OrderRequest): Promise<object> {
  const p = await products.get(req.productId);
  if (req.quantity > p.limitPerUser) throw answer.overLimit(p.limitPerUser);
  let skip: ReadonlySet<number> = p.empty;
  for (let round = 0; round < 4; round++) {
    const order = await trySegments(p, req, skip);
    if (order) return order;
    const { rows } = await query(
      pool,
      `SELECT (SELECT COALESCE(array_agg(idx), '{}') FROM stock_segments WHERE product_id = $1 AND stock >= $3) AS fits,
              (SELECT COALESCE(sum(stock), 0) FROM stock_segments WHERE product_id = $1)::bigint AS remaining,
              EXISTS (SELECT 1 FROM orders WHERE product_id = $1 AND user_id = $2) AS ordered`,
      [req.productId, req.userId, req.quantity],
    );
    const { fits, remaining, ordered } = rows[0] as { fits: number[]; remaining: string; ordered: boolean };
    if (fits.length > 0) {
      skip = new Set([...Array(p.segments).keys()].filter((i) => !fits.includes(i)));
      continue;
    }
    if (ordered) throw answer.alreadyOrdered();
    if (Number(remaining) < req.quantity) throw answer.soldOut();
    throw answer.busy(
      `no single segment holds ${req.quantity} units (this peer does not spread an order over segments)`,
    );
  }
  throw answer.busy('the stock kept moving under this order');
}

/** The user lock turns a user's concurrent duplicates into 409 ORDER_IN_PROGRESS; the unique index keeps one order per user. */
async function place(req: OrderRequest): Promise<object> {
  if (!redis) return sell(req);
  const key = `lock:order:${req.userId}`;
  const token = randomBytes(9).toString('base64');
  const taken = await redis
    .set(key, token, 'PX', USER_LOCK_TTL_MS, 'NX')
    .catch(() => Promise.reject(answer.unavailable('redis')));
  if (taken === null) throw answer.inProgress();
  try {
    return await sell(req);
  } finally {
    await redis.peerReleaseUserLock(key, token).catch(() => undefined);
  }
}

serve({
  redis,
  // Redlock defines its scripts on the client at its first acquire; with auto-pipelining, a pipeline
  // opened earlier in that tick lacks them and ioredis crashes (redis/ioredis#1931). Define them now.
  warmUp: async () => redlock?.acquire(['lock:peer:warm-up'], 1000).then((lock) => lock.release()),
  order: place,
  pool,
});
