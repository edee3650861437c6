// The real application (createApp of src/main.ts, compiled from src/ by SWC under jest) built inside the
// jest process against the test run's PostgreSQL and Redis, with requests sent through Fastify's
// inject instead of a socket. For specs about the HTTP contract: what a call answers and what it
// changes. A spec about processes keeps spawning the built service (service.ts), because there the
// process is what is under test.
//
// Spawned on purpose, and why:
// - faults/* (abuse aside, see below), cluster/*: servers stopped, frozen, flushed or resharded
//   under two service processes; sigterm: a process's drain and exit code.
// - invariants, lifecycle-races, door: every invariant hammered across two service processes
//   sharing one PostgreSQL and one Redis (the project's rule), or state one process must learn
//   from the other (door: sold-out board, shared rate limits).
// - first-run, logging, cluster/configuration: the start of the built entry point itself (embedded
//   servers, log format on a pipe and a terminal, a start refused with an exit code).
// - smoke: the one quick check that the build in dist/ starts and sells; in-process specs never run
//   main() or dist/.
// - start-race: two `npm start` in one checkout.
// - bench/test/peers (the benchmark's workspace): the peer services, started as the benchmark starts them.
// - faults/abuse: mostly an HTTP contract, but its hostile headers and paths are meant to pass through
//   Node's own HTTP parser, which inject skips, and it runs on private servers of its own.
//
// Each app gets its configuration as an explicit environment object (loadConfig's argument), so
// nothing is read from or written to process.env and nothing leaks from one spec to the next.
import http from 'node:http';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import pino from 'pino';
import { loadConfig } from '../../src/config/app-config';
import { resolveDependencies } from '../../src/infrastructure/dependencies';
import { createApp } from '../../src/main';
import { openApps } from './left-open';
import { ADMIN_TOKEN, Send, SHOP_TOKEN, testUrls } from './service';

export type { Send };

export interface InProcessService {
  app: NestFastifyApplication;
  request: Send;
  /** What the app logged (at LOG_LEVEL, warn unless env says otherwise), for a failing spec to show. */
  output(): string;
  close(): Promise<void>;
}

const OUTPUT_KEPT = 200_000;

/**
 * Builds and initialises the app. `env` is on top of what spawned services get (service.ts): the
 * test run's DATABASE_URL and REDIS_URL, the test tokens, rate limits off, LOG_LEVEL warn.
 */
export async function startInProcess(env: Record<string, string> = {}): Promise<InProcessService> {
  const { databaseUrl, redisUrl } = testUrls();
  const config = loadConfig({
    DATABASE_URL: databaseUrl,
    REDIS_URL: redisUrl,
    ADMIN_TOKEN,
    SHOP_TOKEN,
    RATE_LIMIT_USER: '0',
    RATE_LIMIT_IP: '0',
    SHED_LAG_MS: 'off',
    SHED_ORDERS_IN_FLIGHT: '0',
    LOG_LEVEL: 'warn',
    ...env,
  });
  // With both URLs given nothing embedded is started: this only settles the Redis topology.
  const deps = await resolveDependencies(config);
  let out = '';
  // Kept in memory rather than written to jest's stdout, as a spawned service's output is.
  const logger = pino(
    { level: config.logging.level },
    { write: (line: string) => void (out = (out + line).slice(-OUTPUT_KEPT)) },
  );
  let app: NestFastifyApplication;
  try {
    app = await createApp(deps.config, logger);
    await app.init();
    await app.getHttpAdapter().getInstance().ready();
  } catch (err) {
    await deps.stop();
    throw new Error(`in-process app did not start: ${(err as Error).message}\n${out}`, { cause: err });
  }
  const fastify = app.getHttpAdapter().getInstance();
  const request: Send = async (method, path, body, headers = {}) => {
    const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
    const res = await fastify.inject({
      method: method as 'GET',
      url: path,
      headers: { ...(payload !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
      payload,
    });
    const text = res.payload;
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* not JSON: keep the text */
    }
    return { status: res.statusCode, headers: asReceived(res.headers), body: parsed as any, text };
  };
  const service: InProcessService = {
    app,
    request,
    output: () => out,
    close: async () => {
      openApps.delete(service);
      await app.close();
      await deps.stop();
    },
  };
  openApps.add(service);
  return service;
}

/**
 * Builds the app in a beforeAll and closes it in an afterAll of the describe block it is called in
 * (its beforeAll runs after those registered before the call, so a reset of the database goes
 * first). The returned `request` may be used from that beforeAll on.
 */
export function inProcessService(env: Record<string, string> = {}): { request: Send } {
  let svc: InProcessService | undefined;
  beforeAll(async () => {
    svc = await startInProcess(env);
  });
  afterAll(async () => {
    await svc?.close();
    svc = undefined;
  });
  const started = (): InProcessService => {
    if (!svc) throw new Error('the in-process app is not started: call request from a test or a later beforeAll');
    return svc;
  };
  return { request: (method, path, body, headers) => started().request(method, path, body, headers) };
}

/**
 * Header values as a client reads them off the wire: strings (a number set with reply.header
 * arrives as text), set-cookie alone a list.
 */
function asReceived(headers: Record<string, string | string[] | number | undefined>): http.IncomingHttpHeaders {
  const received: http.IncomingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    if (name === 'set-cookie') received[name] = ([] as Array<string | number>).concat(value).map(String);
    else received[name] = Array.isArray(value) ? value.join(', ') : String(value);
  }
  return received;
}
