// What both benchmark peers share: settings from the environment, the POST /orders body check,
// the service's error shape ({ statusCode, code, message }, Retry-After on 503) and a bare
// node:http server with GET /health/live. No framework, on purpose: the peers are the floor.
import http from 'node:http';
import Redis, { RedisOptions } from 'ioredis';
import { DatabaseError, Pool } from 'pg';

export function env(name: string, fallback: number): number {
  const value = process.env[name] === undefined || process.env[name] === '' ? fallback : Number(process.env[name]);
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a number >= 0, not ${process.env[name]}`);
  return value;
}
export const RETRY_AFTER_S = env('RETRY_AFTER_S', 1);
/** Slept inside the lock (bare) or between the script and the INSERT (bare-lua). */
export const HOLD_MS = env('ORDER_HOLD_MS', 0);

// As the service's clients: commands of one tick share a write; while disconnected a command fails
// at once and a Redis that does not answer times out, both a 503 rather than a hang. `serve` connects first.
export const REDIS_OPTIONS: RedisOptions = {
  enableAutoPipelining: true,
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
  commandTimeout: env('REDIS_TIMEOUT_MS', 1000),
  connectTimeout: env('REDIS_TIMEOUT_MS', 1000),
  lazyConnect: true,
};

export function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
}

// A bare peer has no event stream: its sessions tell the schema's outbox triggers to write nothing.
export const peerPool = () =>
  new Pool({
    connectionString: required('DATABASE_URL'),
    max: env('DB_POOL_SIZE', 20),
    options: '-c flashsale.events=off',
  });

export const peerRedis = () =>
  new Redis(required('REDIS_URL'), REDIS_OPTIONS).on('error', (err: Error) => console.error(`redis: ${err.message}`));

/** `load(id)` once per id; a failure is forgotten, so that the next call tries again. */
export function memo<T>(load: (id: number) => Promise<T>): { get(id: number): Promise<T>; forget(id: number): void } {
  const seen = new Map<number, Promise<T>>();
  return {
    get(id) {
      let p = seen.get(id);
      if (!p) {
        p = load(id);
        seen.set(id, p);
        p.catch(() => seen.delete(id));
      }
      return p;
    },
    forget: (id) => seen.delete(id),
  };
}

/** An answer other than 201, with the service's status for its code. */
export class PeerError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}
/** The service's error answers a peer gives, by name: `throw answer.soldOut()`. */
export const answer = {
  busy: (why: string) => new PeerError(503, 'BUSY', why),
  unavailable: (what: 'redis' | 'postgres') =>
    new PeerError(
      503,
      'UNAVAILABLE',
      `${what === 'redis' ? 'the lock service' : 'the database'} is unavailable, retry later`,
    ),
  alreadyOrdered: () => new PeerError(409, 'ALREADY_ORDERED', 'this user already has an order for this product'),
  inProgress: () => new PeerError(409, 'ORDER_IN_PROGRESS', 'another order of this user is in progress'),
  soldOut: () => new PeerError(410, 'SOLD_OUT', 'sold out'),
  notFound: (id: number) => new PeerError(404, 'PRODUCT_NOT_FOUND', `product ${id} does not exist`),
  overLimit: (limit: number) =>
    new PeerError(400, 'QUANTITY_OVER_LIMIT', `quantity is over this product's limit of ${limit} per user`),
};

/** A PostgreSQL failure as the service maps it: the unique index is a fact, a contention is BUSY, the rest an outage. */
export function fromPostgres(err: unknown): PeerError {
  const code = (err as Partial<DatabaseError>).code;
  if (code === '23505') return answer.alreadyOrdered();
  if (code === '40P01' || code === '40001' || code === '55P03') return answer.busy('the stock was contended, retry');
  console.error(`postgres: ${(err as Error).message}`);
  return answer.unavailable('postgres');
}

/** A statement on the peer's pool; a failure rejects with the answer the service would give (fromPostgres). */
export const query = (pool: Pool, sql: string, params: unknown[]) =>
  pool.query(sql, params).catch((err: unknown) => Promise.reject(fromPostgres(err)));

export type OrderRequest = ReturnType<typeof parseOrder>;

const USER_ID = /^[A-Za-z0-9_.:-]{1,64}$/;
const isId = (v: unknown) => Number.isSafeInteger(v) && (v as number) >= 1 && (v as number) <= 2_147_483_647;

/** The service's rules for the body, in a few lines (a positive integer userId becomes its decimal string). */
export function parseOrder(text: string) {
  let body: { userId?: unknown; productId?: unknown; quantity?: unknown };
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    throw new PeerError(400, 'VALIDATION_FAILED', 'request body is not valid JSON');
  }
  const userId = typeof body?.userId === 'number' && isId(body.userId) ? String(body.userId) : body?.userId;
  if (typeof userId !== 'string' || !USER_ID.test(userId))
    throw new PeerError(400, 'VALIDATION_FAILED', 'userId must be 1 to 64 characters from [A-Za-z0-9_.:-]');
  if (!isId(body.productId)) throw new PeerError(400, 'VALIDATION_FAILED', 'productId must be a positive integer');
  if (body.quantity !== undefined && !isId(body.quantity))
    throw new PeerError(400, 'VALIDATION_FAILED', 'quantity must be a positive integer');
  return { userId, productId: body.productId as number, quantity: (body.quantity as number | undefined) ?? 1 };
}

/** The 201 body of an order the peer stored. */
export function created(req: OrderRequest, id: string, createdAt: Date, allocations: object[]): object {
  const { userId, productId, quantity } = req;
  return { id: Number(id), productId, userId, quantity, allocations, createdAt };
}

function send(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

function sendError(res: http.ServerResponse, err: unknown): void {
  if (!(err instanceof PeerError)) console.error(err);
  const e = err instanceof PeerError ? err : new PeerError(500, 'INTERNAL', 'internal error');
  send(
    res,
    e.status,
    { statusCode: e.status, code: e.code, message: e.message },
    e.status === 503 ? { 'retry-after': String(RETRY_AFTER_S) } : {},
  );
}

const BODY_LIMIT = 16 * 1024;

export interface Peer {
  /** Connected before the server listens; a peer whose Redis is down still starts, and answers 503. */
  redis: Redis | null;
  /** Ended, with Redis disconnected, when the peer stops. */
  pool: Pool;
  /** Runs once Redis is connected (or failed to), before the first request. */
  warmUp?: () => Promise<unknown>;
  /** POST /orders: its result is the 201 body, a PeerError the error answer. */
  order: (req: OrderRequest) => Promise<unknown>;
}

/** Serves POST /orders and GET /health/live; stops on SIGTERM/SIGINT. */
export function serve({ redis, pool, warmUp, order }: Peer): void {
  const server = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/health/live') return send(res, 200, { status: 'ok' });
    if (req.method !== 'POST' || req.url !== '/orders')
      return sendError(res, new PeerError(404, 'NOT_FOUND', 'no such route'));
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= BODY_LIMIT) chunks.push(c);
    });
    req.on('end', () => {
      if (size > BODY_LIMIT)
        return sendError(res, new PeerError(413, 'PAYLOAD_TOO_LARGE', 'request body is larger than 16kb'));
      Promise.resolve()
        .then(() => order(parseOrder(Buffer.concat(chunks).toString())))
        .then(
          (created) => send(res, 201, created),
          (err: unknown) => sendError(res, err),
        );
    });
  });
  server.keepAliveTimeout = 65_000;
  const stop = () => {
    server.close();
    server.closeAllConnections();
    redis?.disconnect();
    void pool.end().finally(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  const report = (what: string) => (err: Error) => console.error(`${what}: ${err.message}`);
  void (redis ? redis.connect().catch(report('redis not reachable at start')) : Promise.resolve())
    .then(() => warmUp?.().catch(report('warm-up')))
    .then(() => server.listen(env('PORT', 3000), process.env.HOST ?? '127.0.0.1'));
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
