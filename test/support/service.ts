// Starts built service processes (node dist/src/main.js, through the launcher the benchmark uses
// too) against the test run's PostgreSQL and Redis, and talks to them over real HTTP.
import http from 'node:http';
import { launchService, ServiceProcess } from '../../harness/launcher';

export type { ServiceProcess };
export const ADMIN_TOKEN = 'test-admin-token-0123456789';
export const SHOP_TOKEN = 'test-shop-token-0123456789';

/** This jest worker's PostgreSQL database and Redis server (global-setup.ts gives each worker its own). */
export function testUrls(): { databaseUrl: string; redisUrl: string } {
  const worker = Number(process.env.JEST_WORKER_ID ?? '1') - 1;
  const databaseUrl = process.env.TEST_DATABASE_URLS?.split(',')[worker];
  const redisUrl = process.env.TEST_REDIS_URLS?.split(',')[worker];
  if (!databaseUrl || !redisUrl)
    throw new Error(`no test database or Redis for jest worker ${worker + 1}: run through jest (global setup)`);
  return { databaseUrl, redisUrl };
}

/** Starts one service process (WORKERS=1 unless env says otherwise) on the test run's servers and waits until it serves. */
export function startService(env: Record<string, string> = {}): Promise<ServiceProcess> {
  return startOnTestDatabase({ REDIS_URL: testUrls().redisUrl, ...env });
}

/** The same on a Redis Cluster: REDIS_CLUSTER_NODES and no REDIS_URL (unless env adds one). */
export function startClusterService(clusterNodes: string[], env: Record<string, string> = {}): Promise<ServiceProcess> {
  return startOnTestDatabase({ REDIS_CLUSTER_NODES: clusterNodes.join(','), ...env });
}

function startOnTestDatabase(env: Record<string, string>): Promise<ServiceProcess> {
  const { PORT, ...rest } = env;
  // The door's budgets are off unless a spec sets them: the specs send many buyers from one address.
  // So is load shedding: a storm on a machine loaded by other specs would be shed in part, and the
  // specs that prove shedding (overload) set it themselves.
  return launchService({
    env: {
      DATABASE_URL: testUrls().databaseUrl,
      ADMIN_TOKEN,
      SHOP_TOKEN,
      RATE_LIMIT_USER: '0',
      RATE_LIMIT_IP: '0',
      SHED_LAG_MS: 'off',
      SHED_ORDERS_IN_FLIGHT: '0',
      ...rest,
    },
    port: PORT ? Number(PORT) : undefined,
  });
}

/**
 * Waits for services started together. When one fails to start, the others are stopped before the
 * error is thrown: a spec whose beforeAll fails has no handle to stop them with, and a service left
 * behind would go on working on the database of the specs that run after it.
 */
export async function startedTogether(starts: Array<Promise<ServiceProcess>>): Promise<ServiceProcess[]> {
  const settled = await Promise.allSettled(starts);
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (!failed) return settled.map((s) => (s as PromiseFulfilledResult<ServiceProcess>).value);
  const started = settled.filter((s): s is PromiseFulfilledResult<ServiceProcess> => s.status === 'fulfilled');
  await Promise.all(started.map((s) => s.value.stop()));
  throw failed.reason;
}

export interface Reply<T = any> {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: T;
  text: string;
}

// Idle sockets are closed by the client after 2 s, well before the server's keep-alive timeout
// (72 s): otherwise a request sent on a socket the server is closing at that moment fails with
// ECONNRESET / "socket hang up" (the keep-alive race), which says nothing about the service.
const agent = new http.Agent({ keepAlive: true, maxSockets: 256, timeout: 2000 });

/**
 * One HTTP request; `body` is sent as JSON unless it is a string (sent as given). `from`: the
 * loopback address to send from (any of 127.0.0.0/8), for a client the service has not seen yet.
 */
export function request<T = any>(
  base: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
  from?: string,
): Promise<Reply<T>> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
    const req = http.request(
      `${base}${path}`,
      {
        method,
        agent,
        headers: {
          ...(payload !== undefined
            ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) }
            : {}),
          ...headers,
        },
        timeout: 30_000,
        ...(from === undefined ? {} : { localAddress: from }),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {
            /* not JSON: keep the text */
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: parsed as T, text });
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${method} ${path} timed out`)));
    // Whether the request went out on a kept-alive socket: a reset there, before any response, is
    // the server closing a connection it saw idle, so it never read the request (see placeOrder).
    req.on('error', (err: Error & { reusedSocket?: boolean }) => {
      err.reusedSocket = req.reusedSocket;
      reject(err);
    });
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

/** One HTTP call to a known service: request() over a socket, or an in-process app's inject (in-process.ts). */
export type Send = <T = any>(
  method: string,
  path: string,
  body?: unknown,
  headers?: Record<string, string>,
) => Promise<Reply<T>>;

/** request() bound to the service at `base`. */
export function sender(base: string): Send {
  return (method, path, body, headers) => request(base, method, path, body, headers);
}

export const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
/** The shop backend's credential: pay, and read or cancel any order. */
export const shop = { authorization: `Bearer ${SHOP_TOKEN}` };

export interface NewTestProduct {
  name?: string;
  stock: number;
  segments: number;
  limitPerUser?: number;
  startsAt?: string | null;
  endsAt?: string | null;
  paymentTimeoutS?: number;
  waitingRoom?: boolean;
}

/** Creates a product through the admin API of the service at `to` (its base URL, or how to call it). */
export async function createProduct(to: string | Send, p: NewTestProduct) {
  const send = typeof to === 'string' ? sender(to) : to;
  const res = await send('POST', '/admin/products', { name: p.name ?? 'test product', ...p }, admin);
  if (res.status !== 201) throw new Error(`create product: ${res.status} ${res.text}`);
  return res.body as {
    id: number;
    stock: number;
    stocked: number;
    segmentCount: number;
    segments: Array<{ index: number; stock: number }>;
  };
}

/** Runs `tasks` with at most `limit` in flight. */
export async function pooled<T>(tasks: Array<() => Promise<T>>, limit: number): Promise<T[]> {
  const results = new Array<T>(tasks.length);
  let next = 0;
  const workers = Array.from({ length: Math.min(limit, tasks.length) }, async () => {
    while (next < tasks.length) {
      const i = next++;
      results[i] = await tasks[i]();
    }
  });
  await Promise.all(workers);
  return results;
}
