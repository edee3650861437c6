// Entry point: validates the configuration, starts embedded PostgreSQL/Redis when their URLs are
// unset, applies migrations, then serves HTTP in this process (WORKERS=1) or in a cluster of
// WORKERS processes sharing the port. SIGTERM/SIGINT stop everything gracefully: each serving
// process drains its requests before it closes Redis and PostgreSQL (infrastructure/graceful-shutdown.ts).
import cluster from 'node:cluster';
import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { NestExpressApplication } from '@nestjs/platform-express';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import type { Logger as Pino } from 'pino';
import { AppModule } from './app.module';
import { AllExceptionsFilter } from './common/all-exceptions.filter';
import { jsonBody } from './common/json-body.middleware';
import { validationPipe } from './common/validation.pipe';
import { AppConfig, ConfigurationError, loadConfig, ResolvedConfig } from './config/app-config';
import { resolveDependencies } from './infrastructure/dependencies';
import { closeOnSignals } from './infrastructure/graceful-shutdown';
import { runMigrations } from './infrastructure/migrate';
import { createLogger, nestLogger } from './logging/logger';
import { serveClusterMetrics } from './metrics/metrics.service';

const logger = new Logger('Main');

export async function createApp(config: ResolvedConfig, root: Pino = createLogger(config.logging)): Promise<NestExpressApplication> {
  const app = await NestFactory.create<NestExpressApplication>(AppModule.forRoot(config, root), { bodyParser: false, logger: nestLogger(root) });
  app.disable('x-powered-by');
  app.set('trust proxy', false);
  app.use(jsonBody());
  app.useGlobalPipes(validationPipe());
  app.useGlobalFilters(new AllExceptionsFilter(config.http.retryAfterS));
  const doc = new DocumentBuilder()
    .setTitle('Flash-sale inventory service')
    .setDescription('Orders over segmented stock locks; errors are { statusCode, code, message }.')
    .setVersion('1')
    .addBearerAuth()
    .build();
  SwaggerModule.setup('docs', app, () => SwaggerModule.createDocument(app, doc));
  return app;
}

/** A cluster worker: serves until SIGTERM (sent by the primary), then drains and exits 0. */
async function serve(config: ResolvedConfig, root: Pino): Promise<void> {
  const app = await createApp(config, root);
  closeOnSignals(app);
  await app.listen(config.http.port, config.http.host);
}

/** Resolved settings travel to workers as plain environment variables. */
function workerEnv(c: ResolvedConfig): NodeJS.ProcessEnv {
  return { DATABASE_URL: c.database.url, REDIS_URL: c.redis.url, REDIS_LOCK_URLS: c.redis.lockUrls.join(','), ADMIN_TOKEN: c.admin.token };
}

async function primary(config: AppConfig, root: Pino): Promise<void> {
  const deps = await resolveDependencies(config);
  const resolved = deps.config;
  const applied = await runMigrations(resolved.database.url);
  if (applied.length > 0) logger.log(`migrations applied: ${applied.join(', ')}`);
  if (deps.generatedAdminToken) logger.warn(`ADMIN_TOKEN unset: this run's admin token is ${resolved.admin.token}`);

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.log(`${signal}: stopping`);
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
    process.exit(0);
  };

  if (config.http.workers === 1) {
    const app = await createApp(resolved, root);
    // The app is drained and closed first; the embedded servers it used are stopped after it.
    closeOnSignals(app, () => deps.stop());
    await app.listen(resolved.http.port, resolved.http.host);
    logger.log(`listening on ${resolved.http.host}:${resolved.http.port} (1 process, stock locking: ${resolved.locks.stockLocking})`);
    return;
  }

  cluster.setupPrimary({ silent: false });
  serveClusterMetrics();
  const fork = () => cluster.fork(workerEnv(resolved));
  cluster.on('exit', (worker, code, signal) => {
    if (stopping) return;
    logger.error(`worker ${worker.process.pid} exited (${signal ?? code}); starting another`);
    setTimeout(fork, 500);
  });
  for (let i = 0; i < config.http.workers; i++) fork();
  let listening = 0;
  cluster.on('listening', () => {
    if (++listening === config.http.workers)
      logger.log(`listening on ${resolved.http.host}:${resolved.http.port} (${config.http.workers} processes, stock locking: ${resolved.locks.stockLocking})`);
  });
  process.once('SIGTERM', () => void shutdown('SIGTERM'));
  process.once('SIGINT', () => void shutdown('SIGINT'));
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
  else await serve(config as ResolvedConfig, root);
}

if (require.main === module) {
  main().catch((err: Error) => {
    process.stderr.write(`failed to start: ${err.message}\n`);
    process.exit(1);
  });
}
