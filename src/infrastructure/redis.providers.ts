// ioredis clients, all failing fast while disconnected instead of queueing commands. Standalone:
// one for hints and user locks, one per Redlock master (shared with hints when the URL is the
// same). Redis Cluster: one Cluster client for everything; it is also the one "lock master", so a
// segment lock is a single-master lock on the shard that owns the key's slot.
import { Logger, Provider } from '@nestjs/common';
import Redis, { Cluster, RedisOptions } from 'ioredis';
import { RedisConfig, RedisTopology, ResolvedRedisConfig } from '../config/app-config';
import { defineScripts as defineOrderScripts } from './redis-scripts';

export const REDIS_CLIENT = Symbol('REDIS_CLIENT');
/** A single Redis server or a Redis Cluster: both take the same commands and scripts. */
export type RedisClient = Redis | Cluster;
export const REDIS_LOCK_CLIENTS = Symbol('REDIS_LOCK_CLIENTS');

const logger = new Logger('Redis');

/** Reconnect forever, backing off to one attempt per second. */
const reconnect = (times: number) => Math.min(50 * times, 1000);

function redisOptions(config: RedisConfig): RedisOptions {
  return {
    // Commands fail at once while disconnected: the order path answers 503 rather than hang.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: config.timeoutMs,
    connectTimeout: config.timeoutMs,
    retryStrategy: reconnect,
    lazyConnect: true,
    // Commands issued in the same tick share one write: hundreds of concurrent orders cost far
    // fewer syscalls.
    enableAutoPipelining: true,
  };
}

function clusterClient(nodes: string[], config: RedisConfig): Cluster {
  const { enableOfflineQueue, retryStrategy, lazyConnect, ...perNode } = redisOptions(config);
  const first = new URL(nodes[0]);
  return new Cluster(
    nodes.map((n) => ({ host: new URL(n).hostname, port: Number(new URL(n).port || 6379) })),
    {
      enableOfflineQueue,
      lazyConnect,
      // No auto-pipelining on a cluster. ioredis files an auto-pipelined command under the slot of
      // its first argument, which for a script (Redlock's, beginOrder) is its number of keys: calls
      // for keys on different masters then shared a pipeline that ioredis refused ("All keys in the
      // pipeline should belong to the same slots allocation group"), and orders took live masters
      // for unreachable (503 with every master up, found by test/cluster). Listing the scripts in
      // autoPipeliningIgnoredCommands fixed that, but while slots move the slot table a pipeline
      // was grouped by goes stale between grouping and sending, and the same refusal (or a raw
      // MOVED) still failed whole pipelines: bursts of 503 during a resharding. Sent one by one,
      // every command gets ioredis' own MOVED/ASK handling.
      enableAutoPipelining: false,
      clusterRetryStrategy: retryStrategy,
      // A dead master's slots: ask again soon, but give up within a few tries (the order falls
      // over to a segment on another master, or answers 503), never wait for the failover.
      maxRedirections: 4,
      retryDelayOnClusterDown: 50,
      retryDelayOnFailover: 50,
      retryDelayOnTryAgain: 50,
      slotsRefreshTimeout: config.timeoutMs,
      slotsRefreshInterval: 5000,
      // Credentials of the first URL are used for every node (a cluster shares them).
      redisOptions: {
        ...perNode,
        enableAutoPipelining: false,
        username: decodeURIComponent(first.username) || undefined,
        password: decodeURIComponent(first.password) || undefined,
        tls: first.protocol === 'rediss:' ? {} : undefined,
      },
    },
  );
}

/** Loads every script as a command (ioredis uses EVALSHA, falling back to EVAL), from the registry (redis-scripts.ts). */
export function defineScripts(client: RedisClient): void {
  defineOrderScripts(client);
}

/** Connects, waiting at most the Redis timeout; a Redis that is down at start is retried in the background. */
async function connect(client: RedisClient, name: string): Promise<void> {
  client.on('error', (err: Error) => logger.warn(`${name}: ${err.message}`));
  await client.connect().catch((err: Error) => logger.error(`${name} not reachable at start: ${err.message}`));
}

export const redisProviders: Provider[] = [
  {
    provide: REDIS_CLIENT,
    inject: [RedisConfig],
    useFactory: async (config: ResolvedRedisConfig) => {
      const t = config.topology;
      const client = t.kind === 'cluster' ? clusterClient(t.nodes, config) : new Redis(t.url, redisOptions(config));
      defineScripts(client);
      await connect(client, t.kind === 'cluster' ? 'redis cluster' : 'redis');
      return client;
    },
  },
  {
    provide: REDIS_LOCK_CLIENTS,
    inject: [RedisConfig, REDIS_CLIENT],
    useFactory: async (config: ResolvedRedisConfig, main: RedisClient) => {
      const t: RedisTopology = config.topology;
      if (t.kind === 'cluster') return [main];
      return Promise.all(
        t.lockUrls.map(async (url, i) => {
          if (url === t.url) return main;
          const client = new Redis(url, redisOptions(config));
          // The fencing counter is raised on every lock master (LockService.raiseFence).
          defineScripts(client);
          await connect(client, `redis lock master ${i}`);
          return client;
        }),
      );
    },
  },
];
