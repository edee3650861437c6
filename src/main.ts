// Entry point: validates the configuration, starts embedded PostgreSQL/Redis when their URLs are
// unset, applies migrations, then serves HTTP in this process (WORKERS=1) or in a cluster of
// WORKERS processes sharing the port. SIGTERM/SIGINT stop everything gracefully: each serving
// process drains its requests before it closes Redis and PostgreSQL (infrastructure/graceful-shutdown.ts).
// First: the modules loaded after it are compiled from Node's compile cache when it has them.
import { keepCompiledCode } from './infrastructure/compile-cache';
import cluster from 'node:cluster';
import type { IncomingMessage, Server } from 'node:http';
import { Logger } from '@nestjs/common';
import { HttpAdapterHost, NestFactory } from '@nestjs/core';
import { FastifyAdapter, NestFastifyApplication } from '@nestjs/platform-fastify';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { SwaggerModule } from '@nestjs/swagger';
import underPressure from '@fastify/under-pressure';
import type { Logger as Pino } from 'pino';
import { AppModule } from './app.module';
import { AllExceptionsFilter, sendError } from './common/all-exceptions.filter';
import { capConnectionsPerAddress, drainRefusedBodies, serverOptions } from './infrastructure/connections';
import { registerJsonBody } from './common/json-body';
import { RouteMethods } from './common/route-methods';
import { DoorService } from './door/door.service';
import { LoadShedder } from './door/load-shedder';
import { requestId } from './common/request-id';
import { validationPipe } from './common/validation.pipe';
import { AppConfig, ConfigurationError, loadConfig, ResolvedConfig } from './config/app-config';
import { Dependencies, resolveDependencies, topology } from './infrastructure/dependencies';
import { closeOnSignals } from './infrastructure/graceful-shutdown';
import { runMigrations } from './infrastructure/migrate';
import { serviceUrl, startLinks } from './infrastructure/start-links';
import { createLogger, nestLogger } from './logging/logger';
import { MetricsService, serveClusterMetrics } from './metrics/metrics.service';
import { openApiDocument } from './openapi';
import { queueAnswers } from './waiting-room/queue-answers';
import { WaitingRoomService } from './waiting-room/waiting-room.service';

const logger = new Logger('Main');

export async function createApp(
  config: ResolvedConfig,
  root: Pino = createLogger(config.logging),
): Promise<NestFastifyApplication> {
  // Counted once the metrics exist; the server is made before them.
  let timedOut = (): void => undefined;
  const adapter: FastifyAdapter = new FastifyAdapter({
    // Keep-alive for the proxies in front; headers and body within bounds (infrastructure/connections.ts).
    ...serverOptions(config.http, () => timedOut()),
    // A waiting-room ticket travels in the path (GET /products/:id/queue/:ticket): about 150 characters.
    // (A router option: at the top level Fastify 5 warns that it is deprecated, at every start.)
    routerOptions: { maxParamLength: 512 },
    // request.ip is the socket's address, or X-Forwarded-For's nearest hop that is not one of
    // these proxies (rate limits per address; a forged header from elsewhere changes nothing).
    trustProxy: config.door.trustProxy ?? false,
    // Fastify names the request; the middleware that hands it to pino-http copies this id onto the
    // raw request, which pino-http then logs (its own genReqId is not consulted once an id is set).
    genReqId: (req: IncomingMessage) => requestId(req.headers),
    // Requests still arriving while the app closes are served (with Connection: close, see
    // graceful-shutdown.ts), not refused with a bare 503 that lacks Retry-After.
    return503OnClosing: false,
    // A URL the router cannot decode is answered in the service's error shape too.
    frameworkErrors: (err: FastifyError, _req: FastifyRequest, reply: FastifyReply) =>
      sendError(adapter, reply, err, config.http.retryAfterS),
  });
  // abortOnError false: a failing bootstrap throws to the caller, who stops the servers it started
  // (Nest's default process.abort() would leave them running).
  const app = await NestFactory.create<NestFastifyApplication>(AppModule.forRoot(config, root), adapter, {
    bodyParser: false,
    logger: nestLogger(root),
    abortOnError: false,
  });
  const fastify = app.getHttpAdapter().getInstance();
  const metrics = app.get(MetricsService);
  const server: Server = app.getHttpServer();
  capConnectionsPerAddress(server, config.http.maxConnectionsPerIp, config.door.trustProxy, () =>
    metrics.connectionsRefused.inc(),
  );
  timedOut = () => metrics.requestTimeouts.inc();
  const routes = new RouteMethods(fastify);
  registerJsonBody(fastify);
  drainRefusedBodies(fastify);
  fastify.addHook('onRequest', (req, reply, done) => {
    reply.header('X-Request-Id', req.id);
    done();
  });
  // The event-loop delay the door's load shedder reads: @fastify/under-pressure's sampler alone
  // (no thresholds of its own, so it adds no hook; LoadShedder decides by the class of call).
  await fastify.register(underPressure, { sampleInterval: config.overload.sampleMs });
  app.get(LoadShedder).measureWith(() => fastify.memoryUsage().eventLoopDelay);
  fastify.addHook('preHandler', app.get(DoorService).preHandler);
  // Joins and polls that the door let through are answered here, before Nest's pipeline.
  fastify.addHook('preHandler', queueAnswers(app.get(WaitingRoomService)));
  app.useGlobalPipes(validationPipe());
  app.useGlobalFilters(
    new AllExceptionsFilter(app.get(HttpAdapterHost), config.http.retryAfterS, {
      clientAborted: () => metrics.clientAborts.inc(),
      routes,
    }),
  );
  SwaggerModule.setup('docs', app, () => openApiDocument(app));
  return app;
}

/** A cluster worker: serves until SIGTERM (sent by the primary), then drains and exits 0. */
async function serve(config: ResolvedConfig, root: Pino): Promise<void> {
  const app = await createApp(config, root);
  closeOnSignals(app);
  await app.listen(config.http.port, config.http.host);
  keepCompiledCode();
}

/** Resolved settings travel to workers as plain environment variables. */
function workerEnv(c: ResolvedConfig): NodeJS.ProcessEnv {
  const t = c.redis.topology;
  const redis =
    t.kind === 'cluster'
      ? { REDIS_CLUSTER_NODES: t.nodes.join(',') }
      : { REDIS_URL: t.url, REDIS_LOCK_URLS: t.lockUrls.join(',') };
  return { DATABASE_URL: c.database.url, ...redis, ADMIN_TOKEN: c.admin.token, SHOP_TOKEN: c.identity.shopToken };
}

/** Turns a failed start into what to do; the message of an error already written for a person stays. */
export function startFailure(err: unknown, config: Pick<AppConfig['http'], 'port' | 'host'>): string {
  const e = err as NodeJS.ErrnoException;
  if (e?.code === 'EADDRINUSE')
    return `port ${config.port} is in use on ${config.host}: set PORT to a free port, or stop what listens there`;
  if (e?.code === 'EACCES' && e.syscall === 'listen')
    return `port ${config.port} needs privileges on ${config.host}: set PORT to 1024 or above`;
  if (e?.code === 'EADDRNOTAVAIL')
    return `HOST ${config.host} is no address of this machine: set HOST (0.0.0.0 for every address)`;
  return e instanceof Error ? e.message : String(err);
}

/**
 * startFailure, except that a port taken by a service that answers as this one does (GET
 * /health/live) is said to be that: most often the service started a second time.
 */
async function explainFailure(err: unknown, config: Pick<AppConfig['http'], 'port' | 'host'>): Promise<string> {
  const said = startFailure(err, config);
  if ((err as NodeJS.ErrnoException)?.code !== 'EADDRINUSE') return said;
  const host = ['0.0.0.0', '::'].includes(config.host) ? '127.0.0.1' : config.host;
  const live = await fetch(`${serviceUrl({ host, port: config.port })}/health/live`, {
    signal: AbortSignal.timeout(1000),
  }).then(
    (res) => res.ok,
    () => false,
  );
  if (!live) return said;
  return (
    `the service is already running on port ${config.port} (${serviceUrl(config)}/health/live answers): ` +
    'use it, or set PORT to a free port for a second one'
  );
}

/** Sent by a worker that could not start, so the primary can stop everything and say why. */
interface StartFailedMessage {
  startFailed: string;
}

async function primary(config: AppConfig, root: Pino): Promise<void> {
  // Until the service is up, a signal stops what was started so far; servers still starting are
  // stopped by their own on-exit hooks.
  const starting: { deps?: Dependencies } = {};
  let aborting = false;
  const abortStart = (signal: NodeJS.Signals) => {
    if (aborting) return;
    aborting = true;
    logger.warn(`${signal} before the service was up: stopping what was started`);
    void Promise.resolve(starting.deps?.stop()).finally(() => process.exit(130));
  };
  process.on('SIGINT', abortStart);
  process.on('SIGTERM', abortStart);
  const started = () => {
    process.removeListener('SIGINT', abortStart);
    process.removeListener('SIGTERM', abortStart);
  };

  const deps = await resolveDependencies(config);
  starting.deps = deps;
  const resolved = deps.config;
  let app: NestFastifyApplication | undefined;
  try {
    const applied = await runMigrations(resolved.database.url);
    if (applied.length > 0) logger.log(`migrations applied: ${applied.join(', ')}`);
    if (deps.generatedAdminToken) logger.warn(`ADMIN_TOKEN unset: this run's admin token is ${resolved.admin.token}`);
    if (deps.generatedShopToken)
      logger.warn(`SHOP_TOKEN unset: this run's shop token is ${resolved.identity.shopToken}`);
    if (!resolved.identity.jwtSecret && !resolved.identity.jwtPublicKey) {
      logger.log(
        'BUYER_JWT_SECRET and BUYER_JWT_PUBLIC_KEY unset: buyer identity is off, POST /orders trusts the userId of its body',
      );
    }
    if (config.http.workers === 1) {
      app = await createApp(resolved, root);
      await app.listen(resolved.http.port, resolved.http.host);
    }
  } catch (err) {
    const message = await explainFailure(err, config.http);
    await app?.close().catch(() => undefined);
    await deps.stop();
    throw new Error(message, { cause: err });
  }
  if (aborting) return;

  if (app) {
    started();
    // The app is drained and closed first; the embedded servers it used are stopped after it.
    closeOnSignals(app, () => deps.stop());
    logger.log(`listening on ${resolved.http.host}:${resolved.http.port} (1 process)`);
    logger.log(startLinks(resolved.http));
    keepCompiledCode();
    return;
  }
  serveCluster(config, deps, started);
}

function serveCluster(config: AppConfig, deps: Dependencies, started: () => void): void {
  const resolved = deps.config;
  let stopping = false;
  let up = false;
  const stopAll = async (): Promise<void> => {
    stopping = true;
    await Promise.all(
      Object.values(cluster.workers ?? {}).map(
        (w) =>
          new Promise<void>((resolve) => {
            if (!w || w.isDead()) return resolve();
            const kill = setTimeout(() => w.process.kill('SIGKILL'), 15_000);
            w.once('exit', () => {
              clearTimeout(kill);
              resolve();
            });
            w.process.kill('SIGTERM');
          }),
      ),
    );
    await deps.stop();
  };
  const shutdown = async (signal: string) => {
    if (stopping) return;
    logger.log(`${signal}: stopping`);
    await stopAll();
    process.exit(0);
  };
  // A worker that cannot start (port taken, bootstrap failing) would fail the same way again:
  // before the cluster is up, its failure ends the start instead of a restart loop.
  let failure: string | undefined;
  const failStart = async (why: string) => {
    if (stopping) return;
    await stopAll();
    process.stderr.write(`failed to start: ${why}\n`);
    process.exit(1);
  };

  cluster.setupPrimary({ silent: false });
  serveClusterMetrics();
  const fork = () => cluster.fork(workerEnv(resolved));
  cluster.on('message', (_worker, msg: Partial<StartFailedMessage>) => {
    if (typeof msg?.startFailed === 'string') failure ??= msg.startFailed;
  });
  cluster.on('exit', (worker, code, signal) => {
    if (stopping) return;
    if (!up) return void failStart(failure ?? `worker ${worker.process.pid} exited (${signal ?? code})`);
    logger.error(`worker ${worker.process.pid} exited (${signal ?? code}); starting another`);
    setTimeout(fork, 500);
  });
  for (let i = 0; i < config.http.workers; i++) fork();
  let listening = 0;
  cluster.on('listening', () => {
    if (++listening !== config.http.workers || up) return;
    up = true;
    logger.log(`listening on ${resolved.http.host}:${resolved.http.port} (${config.http.workers} processes)`);
    logger.log(startLinks(resolved.http));
    keepCompiledCode();
  });
  started();
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
}

async function main(): Promise<void> {
  let config: AppConfig;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigurationError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  // Every `new Logger(context)` line, from the first, goes through this process's one pino logger.
  const root = createLogger(config.logging);
  Logger.overrideLogger(nestLogger(root));
  if (cluster.isPrimary) await primary(config, root);
  // A worker's environment names everything the primary resolved (workerEnv): only the Redis topology is derived.
  else
    await serve(
      { ...config, redis: { ...config.redis, topology: topology(config.redis, config.redis.url) } } as ResolvedConfig,
      root,
    );
}

if (require.main === module) {
  main().catch(async (err: Error) => {
    const message = cluster.isWorker ? await explainFailure(err, loadConfig().http) : err.message;
    // A worker tells the primary, which stops everything and says it once; exit only once it is sent.
    if (cluster.isWorker && process.send)
      return void process.send({ startFailed: message } satisfies StartFailedMessage, () => process.exit(1));
    process.stderr.write(`failed to start: ${message}\n`);
    process.exit(1);
  });
}
