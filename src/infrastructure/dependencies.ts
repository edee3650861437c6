// Resolves what the service talks to: the configured PostgreSQL and Redis, or private embedded
// ones when DATABASE_URL / REDIS_URL are unset; also makes the admin and shop tokens when none is set.
import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import { Logger } from '@nestjs/common';
import { AppConfig, RedisConfig, RedisTopology, ResolvedConfig } from '../config/app-config';
import { claimDataDir } from './data-dir-claim';
import { startEmbeddedPostgres } from './embedded-postgres';
import { startEmbeddedRedis } from './embedded-redis';

export interface Dependencies {
  config: ResolvedConfig;
  generatedAdminToken: boolean;
  generatedShopToken: boolean;
  stop(): Promise<void>;
}

export async function resolveDependencies(
  config: AppConfig,
  logger = new Logger('Dependencies'),
): Promise<Dependencies> {
  const stops: Array<() => Promise<void>> = [];
  const stop = async () => {
    for (const s of stops.reverse()) await s().catch((err: Error) => logger.warn(`stopping: ${err.message}`));
  };
  try {
    let databaseUrl = config.database.url;
    if (!databaseUrl) {
      const release = claimDataDir(resolve(config.embedded.dataDir), config.http);
      stops.push(() => Promise.resolve(release()));
      const dataDir = resolve(config.embedded.dataDir, 'postgres');
      const pg = await startEmbeddedPostgres({
        dataDir,
        database: 'flashsale',
        log: (line) => logger.debug(line),
      });
      for (const note of pg.notes) logger.log(`embedded PostgreSQL runs as the postgres user: ${note}`);
      const where = pg.dataDir === dataDir ? dataDir : `${pg.dataDir}, linked from ${dataDir}`;
      stops.push(async () => {
        await pg.stop();
        logger.log(`stopped embedded PostgreSQL (pid ${pg.pid}); its data stays in ${where}`);
      });
      databaseUrl = pg.url;
      logger.log(
        `DATABASE_URL unset: started embedded PostgreSQL (pid ${pg.pid}) on 127.0.0.1:${pg.port}, data in ${where}`,
      );
    }
    let redisUrl = config.redis.url;
    if (!redisUrl && !config.redis.clusterNodes) {
      const redis = await startEmbeddedRedis();
      stops.push(async () => {
        await redis.stop();
        logger.log(`stopped redis-server (pid ${redis.process.pid})`);
      });
      redisUrl = redis.url;
      logger.log(`REDIS_URL unset: started redis-server (pid ${redis.process.pid}) on ${redis.url} (no persistence)`);
    }
    const generatedAdminToken = !config.admin.token;
    const adminToken = config.admin.token ?? randomBytes(24).toString('base64url');
    const generatedShopToken = !config.identity.shopToken;
    const shopToken = config.identity.shopToken ?? randomBytes(24).toString('base64url');
    return {
      config: {
        ...config,
        database: { ...config.database, url: databaseUrl },
        redis: { ...config.redis, topology: topology(config.redis, redisUrl) },
        admin: { ...config.admin, token: adminToken },
        identity: { ...config.identity, shopToken },
      },
      generatedAdminToken,
      generatedShopToken,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** Where Redis is, once every URL is known (a worker gets them all from its primary's environment). */
export function topology(redis: RedisConfig, url: string | undefined): RedisTopology {
  if (redis.clusterNodes) return { kind: 'cluster', nodes: redis.clusterNodes };
  if (!url) throw new Error('no Redis: REDIS_URL unset and no embedded redis-server started');
  return { kind: 'standalone', url, lockUrls: redis.lockUrls ?? [url] };
}
