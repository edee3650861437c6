// Which Redis master a key lives on, and whether that master failed a moment ago. On a Redis
// Cluster a dead or frozen master costs every call to its slots a failure (a timeout, or ioredis's
// redirection retries); remembering it for DOWN_MEMORY_MS lets orders pass over its segments, its
// hints and its user locks at once instead of paying that per call. Outside a cluster there is one
// set of masters for every key, and this remembers nothing: a lost Redis is answered as before.
import { Inject, Injectable } from '@nestjs/common';
import calculateSlot from 'cluster-key-slot';
import { Cluster } from 'ioredis';
import { REDIS_CLIENT, RedisClient } from './redis.providers';

/**
 * A Redis Cluster error that says a slot is moving (MOVED, ASK, TRYAGAIN, or a pipeline grouped
 * by a stale slot table), not that a master is lost: the call is worth retrying, the master is fine.
 */
export function isSlotMove(err: unknown): boolean {
  const message = err instanceof Error ? err.message : String(err);
  return /^(MOVED|ASK|TRYAGAIN) /.test(message) || message.includes('same slots allocation group');
}

/** How long a master that failed a call is passed over before it is asked again. */
export const DOWN_MEMORY_MS = 1000;

@Injectable()
export class RedisReachability {
  private readonly cluster: Cluster | null;
  private readonly downUntil = new Map<string, number>();

  constructor(@Inject(REDIS_CLIENT) client: RedisClient) {
    this.cluster = client instanceof Cluster ? client : null;
  }

  /** True on a Redis Cluster: a master's loss is then one shard's, not all of Redis. */
  get sharded(): boolean {
    return this.cluster !== null;
  }

  /** The master owning the key's slot (`host:port`) on a cluster; "quorum" (every lock master) otherwise. */
  masterOf(key: string): string {
    if (!this.cluster) return 'quorum';
    return this.cluster.slots[calculateSlot(key)]?.[0] ?? 'unknown';
  }

  /** Whether this master (from masterOf) failed a call within DOWN_MEMORY_MS (always false outside a cluster). */
  isDown(master: string, now = Date.now()): boolean {
    return this.downUntil.size > 0 && (this.downUntil.get(master) ?? 0) > now;
  }

  /** A call to this master failed with `err`; a slot on the move does not make the master down. */
  markDown(master: string, err?: unknown, now = Date.now()): void {
    if (this.cluster && !isSlotMove(err)) this.downUntil.set(master, now + DOWN_MEMORY_MS);
  }

  /** A call to this master succeeded: it is back. */
  markUp(master: string): void {
    if (this.downUntil.size > 0) this.downUntil.delete(master);
  }
}
