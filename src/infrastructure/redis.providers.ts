// ioredis clients: one for hints, one per Redlock master (shared with hints when the URL is the
// same), all failing fast while disconnected instead of queueing commands.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Logger, Provider } from '@nestjs/common';
import Redis, { RedisOptions, Result } from 'ioredis';
import { RedisConfig, ResolvedRedisConfig } from '../config/app-config';
import { projectRoot } from './project-root';

export const REDIS_CLIENT = Symbol('REDIS_CLIENT');
export const REDIS_LOCK_CLIENTS = Symbol('REDIS_LOCK_CLIENTS');

declare module 'ioredis' {
  interface RedisCommander<Context> {
    beginOrder(
      soldOutKey: string,
      userLockKey: string,
      emptyKey: string,
      generationKey: string,
      token: string,
      ttlMs: number,
      generationTtlMs: number,
    ): Result<number[], Context>;
    markSoldOut(soldOutKey: string, generationKey: string, generation: number, ttlMs: number): Result<number, Context>;
    stockReturned(soldOutKey: string, generationKey: string, emptyKey: string, ttlMs: number, ...segments: number[]): Result<number, Context>;
    endOrder(userLockKey: string, token: string): Result<number, Context>;
    markSegmentEmpty(emptyKey: string, segment: number, ttlMs: number): Result<number, Context>;
  }
}

const logger = new Logger('Redis');

function redisOptions(config: RedisConfig): RedisOptions {
  return {
    // Commands fail at once while disconnected: the order path answers 503 rather than hang.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: config.timeoutMs,
    connectTimeout: config.timeoutMs,
    // Reconnect forever, backing off to one attempt per second.
    retryStrategy: (times) => Math.min(50 * times, 1000),
    lazyConnect: true,
    // Commands issued in the same tick share one write: hundreds of concurrent orders cost far
    // fewer syscalls.
    enableAutoPipelining: true,
  };
}

/** Loads every script in lua/ as a command (ioredis uses EVALSHA, falling back to EVAL). */
export function defineScripts(client: Redis): void {
  const dir = join(projectRoot(), 'lua');
  client.defineCommand('beginOrder', { numberOfKeys: 4, lua: readFileSync(join(dir, 'begin-order.lua'), 'utf8') });
  client.defineCommand('markSoldOut', { numberOfKeys: 2, lua: readFileSync(join(dir, 'mark-sold-out.lua'), 'utf8') });
  client.defineCommand('stockReturned', { numberOfKeys: 3, lua: readFileSync(join(dir, 'stock-returned.lua'), 'utf8') });
  client.defineCommand('endOrder', { numberOfKeys: 1, lua: readFileSync(join(dir, 'end-order.lua'), 'utf8') });
  client.defineCommand('markSegmentEmpty', { numberOfKeys: 1, lua: readFileSync(join(dir, 'mark-segment-empty.lua'), 'utf8') });
}

/** Connects, waiting at most the Redis timeout; a Redis that is down at start is retried in the background. */
async function connect(client: Redis, name: string): Promise<void> {
  client.on('error', (err: Error) => logger.warn(`${name}: ${err.message}`));
  await client.connect().catch((err: Error) => logger.error(`${name} not reachable at start: ${err.message}`));
}

export const redisProviders: Provider[] = [
  {
    provide: REDIS_CLIENT,
    inject: [RedisConfig],
    useFactory: async (config: ResolvedRedisConfig) => {
      const client = new Redis(config.url, redisOptions(config));
      defineScripts(client);
      await connect(client, 'redis');
      return client;
    },
  },
  {
    provide: REDIS_LOCK_CLIENTS,
    inject: [RedisConfig, REDIS_CLIENT],
    useFactory: async (config: ResolvedRedisConfig, main: Redis) =>
      Promise.all(
        config.lockUrls.map(async (url, i) => {
          if (url === config.url) return main;
          const client = new Redis(url, redisOptions(config));
          await connect(client, `redis lock master ${i}`);
          return client;
        }),
      ),
  },
];
