// Starts built service processes (node dist/src/main.js) against the test run's PostgreSQL and
// Redis, and talks to them over real HTTP.
import { ChildProcess, spawn } from 'node:child_process';
import http from 'node:http';
import { join } from 'node:path';
import { freePort } from '../../src/infrastructure/free-port';

export const ADMIN_TOKEN = 'test-admin-token-0123456789';
const root = join(__dirname, '..', '..');

export interface ServiceProcess {
  url: string;
  port: number;
  child: ChildProcess;
  output: () => string;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export function testUrls(): { databaseUrl: string; redisUrl: string } {
  const databaseUrl = process.env.TEST_DATABASE_URL;
  const redisUrl = process.env.TEST_REDIS_URL;
  if (!databaseUrl || !redisUrl) throw new Error('TEST_DATABASE_URL / TEST_REDIS_URL unset: run through jest (global setup)');
  return { databaseUrl, redisUrl };
}

/** Starts one service process (WORKERS=1 unless env says otherwise) and waits until it serves. */
export async function startService(env: Record<string, string> = {}): Promise<ServiceProcess> {
  const { databaseUrl, redisUrl } = testUrls();
  const port = env.PORT ? Number(env.PORT) : await freePort();
  let out = '';
  const child = spawn(process.execPath, [join(root, 'dist', 'src', 'main.js')], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATABASE_URL: databaseUrl,
      REDIS_URL: redisUrl,
      ADMIN_TOKEN,
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      ...env,
      PORT: String(port),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (c: Buffer) => (out = (out + c.toString()).slice(-200_000)));
  child.stderr?.on('data', (c: Buffer) => (out = (out + c.toString()).slice(-200_000)));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`service exited with ${child.exitCode} before serving:\n${out}`);
    const ok = await request(url, 'GET', '/health/live').then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`service did not serve within 60 s:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    port,
    child,
    output: () => out,
    stop: (signal: NodeJS.Signals = 'SIGTERM') =>
      new Promise((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve(child.exitCode);
        const kill = setTimeout(() => child.kill('SIGKILL'), 20_000);
        child.once('exit', (code) => {
          clearTimeout(kill);
          resolve(code);
        });
        child.kill(signal);
      }),
  };
}

export interface Reply<T = any> {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: T;
  text: string;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });

/** One HTTP request; `body` is sent as JSON unless it is a string (sent as given). */
export function request<T = any>(base: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Reply<T>> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
    const req = http.request(
      `${base}${path}`,
      {
        method,
        agent,
        headers: {
          ...(payload !== undefined ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}),
          ...headers,
        },
        timeout: 30_000,
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
    req.on('error', reject);
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

export const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

export async function createProduct(base: string, p: { name?: string; stock: number; segments: number; limitPerUser?: number }) {
  const res = await request(base, 'POST', '/admin/products', { name: p.name ?? 'test product', ...p }, admin);
  if (res.status !== 201) throw new Error(`create product: ${res.status} ${res.text}`);
  return res.body as { id: number; stock: number; segmentCount: number; segments: Array<{ index: number; stock: number }> };
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
