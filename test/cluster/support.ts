// Helpers of the Redis Cluster specs: a throwaway 3-master cluster with two service processes on it
// (and the test run's PostgreSQL), where a product's keys live, and Redis-side evidence of the
// segment-lock traffic each master served.
import Redis from 'ioredis';
import {
  EmbeddedRedisCluster,
  RedisClusterNode,
  startEmbeddedRedisCluster,
} from '../../harness/embedded-redis-cluster';
import { stopAll } from '../faults/support';
import { resetState } from '../support/database';
import { ServiceProcess, startClusterService, startedTogether } from '../support/service';

export interface ClusterSale {
  cluster: EmbeddedRedisCluster;
  a: ServiceProcess;
  b: ServiceProcess;
  /** Alternates the two processes. */
  pick: (i: number) => string;
  stop: () => Promise<void>;
}

/** Empties PostgreSQL, starts a 3-master cluster and two service processes on it (REDIS_CLUSTER_NODES only). */
export async function startClusterSale(env: Record<string, string> = {}): Promise<ClusterSale> {
  await resetState();
  const cluster = await startEmbeddedRedisCluster({ masters: 3 });
  let services: ServiceProcess[] = [];
  try {
    services = await startedTogether([startClusterService(cluster.urls, env), startClusterService(cluster.urls, env)]);
  } catch (err) {
    await stopAll(...services.map((s) => () => s.stop()), () => cluster.stop());
    throw err;
  }
  const [a, b] = services;
  return {
    cluster,
    a,
    b,
    pick: (i) => (i % 2 === 0 ? a : b).url,
    stop: () =>
      stopAll(
        () => a.stop(),
        () => b.stop(),
        () => cluster.stop(),
      ),
  };
}

/** A plain connection to one node (no redirects followed). */
export async function onNode<T>(url: string, work: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis(url, { maxRetriesPerRequest: 1 });
  r.on('error', () => undefined);
  try {
    return await work(r);
  } finally {
    r.disconnect();
  }
}

/** The master of each segment lock `lock:stock:<productId>:<idx>`, by index. */
export function segmentMasters(
  cluster: EmbeddedRedisCluster,
  productId: number,
  segments: number,
): Promise<RedisClusterNode[]> {
  return Promise.all(Array.from({ length: segments }, (_, idx) => cluster.nodeOf(`lock:stock:${productId}:${idx}`)));
}

/** The master of a product's hints (`hint:*:{<productId>}`: one slot per product). */
export function hintMaster(cluster: EmbeddedRedisCluster, productId: number): Promise<RedisClusterNode> {
  return cluster.nodeOf(`hint:soldout:{${productId}}`);
}

/** The master of a user's order lock `lock:order:<userId>`. */
export function userLockMaster(cluster: EmbeddedRedisCluster, userId: string): Promise<RedisClusterNode> {
  return cluster.nodeOf(`lock:order:${userId}`);
}

/** Calls of Lua scripts (EVALSHA and EVAL) a node has served, from INFO commandstats. */
export async function scriptCalls(node: RedisClusterNode): Promise<number> {
  const stats = await onNode(node.url, (r) => r.info('commandstats'));
  return [...stats.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
}

/**
 * Counts, per node, the writes of a product's segment-lock keys as the node itself reports them
 * (keyspace notifications: `set` for a lock taken or extended, `del` for one released), with the
 * keys seen. A node only writes keys of the slots it serves.
 */
export async function watchSegmentLocks(
  cluster: EmbeddedRedisCluster,
  productId: number,
): Promise<{ counts: () => Map<RedisClusterNode, { set: number; del: number; keys: Set<string> }>; stop: () => void }> {
  const counts = new Map(cluster.nodes.map((n) => [n, { set: 0, del: 0, keys: new Set<string>() }]));
  const subscribers = await Promise.all(
    cluster.nodes.map(async (node) => {
      await onNode(node.url, (r) => r.config('SET', 'notify-keyspace-events', 'K$g'));
      const sub = new Redis(node.url);
      sub.on('error', () => undefined);
      const prefix = '__keyspace@0__:';
      sub.on('pmessage', (_pattern: string, channel: string, event: string) => {
        const c = counts.get(node) as { set: number; del: number; keys: Set<string> };
        if (event === 'set') c.set++;
        else if (event === 'del') c.del++;
        c.keys.add(channel.slice(prefix.length));
      });
      await sub.psubscribe(`${prefix}lock:stock:${productId}:*`);
      return sub;
    }),
  );
  return { counts: () => counts, stop: () => subscribers.forEach((s) => s.disconnect()) };
}
