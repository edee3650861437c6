// Redlock locks (segment, user, rebalance) over the configured lock masters, with the two ways this
// service takes a lock: one try (fall over to another segment when busy) and a bounded wait.
import { setTimeout as sleep } from 'node:timers/promises';
import { Inject, Injectable, OnModuleInit } from '@nestjs/common';
import { ExecutionError, Lock, Redlock, ResourceLockedError } from '@sesamecare-oss/redlock';
import { HttpConfig, LocksConfig, RedisConfig, ResolvedRedisConfig } from '../config/app-config';
import { BusyError, UnavailableError } from '../common/domain-errors';
import { MetricsService } from '../metrics/metrics.service';
import { isSlotMove } from '../infrastructure/redis-reachability';
import { REDIS_LOCK_CLIENTS, RedisClient } from '../infrastructure/redis.providers';

/** A lock this process holds, and its pending automatic extension. */
export class HeldLock {
  released = false;
  timer?: NodeJS.Timeout;
  constructor(
    public lock: Lock,
    readonly key: string,
    readonly ttlMs: number,
  ) {}
}

@Injectable()
export class LockService implements OnModuleInit {
  private readonly redlock: Redlock;
  /** When each lock master last answered a vote (for or against): the evidence that it lives. */
  private readonly lastHeard = new Map<unknown, number>();
  /** A master silent for longer than this is taken for lost, its timed-out votes with it. */
  private readonly silenceMs: number;
  /**
   * On a Redis Cluster the one "master" is the whole cluster: it answers for the live shards while
   * one shard is frozen, so a timed-out vote there means that key's shard is lost, not slow.
   */
  private readonly timeoutMeansLost: boolean;

  constructor(
    private readonly config: LocksConfig,
    private readonly http: HttpConfig,
    @Inject(RedisConfig) redis: ResolvedRedisConfig,
    @Inject(REDIS_LOCK_CLIENTS) clients: RedisClient[],
    private readonly metrics: MetricsService,
  ) {
    // Retries are this service's own (fall over first, then a bounded wait), so Redlock tries once.
    this.redlock = new Redlock(clients, { retryCount: 0, driftFactor: 0.01 });
    this.silenceMs = 2 * redis.timeoutMs;
    this.timeoutMeansLost = redis.topology.kind === 'cluster';
    const now = Date.now();
    for (const client of clients) this.lastHeard.set(client, now);
  }

  /**
   * Redlock defines its scripts on each client at the first acquire. With auto-pipelining on,
   * ioredis can fail a pipeline opened in the same tick as that definition (ioredis#1931), so one
   * throwaway acquire at start defines them before any order is in flight. Its outcome is irrelevant.
   */
  async onModuleInit(): Promise<void> {
    const key = `lock:warmup:${process.pid}:${Date.now()}`;
    await this.redlock
      .acquire([key], 100)
      .then(
        (lock) => this.redlock.release(lock),
        () => undefined,
      )
      .catch(() => undefined);
  }

  /**
   * One attempt. Resolves null when another holder has the lock or the vote was cut short by
   * timeouts; throws UnavailableError when too many masters are unreachable for a quorum.
   */
  async tryAcquire(key: string, ttlMs: number): Promise<HeldLock | null> {
    try {
      const lock = await this.redlock.acquire([key], ttlMs);
      const held = new HeldLock(lock, key, ttlMs);
      if (this.config.extend) this.scheduleExtension(held);
      void lock.attempts[lock.attempts.length - 1].then((stats) => this.heard(stats.votesFor));
      return held;
    } catch (err) {
      if (await this.lockedByOther(err)) return null;
      this.metrics.dependencyErrors.inc({ dependency: 'redis' });
      throw new UnavailableError('redis', this.http.retryAfterS, err);
    }
  }

  /** Waits (bounded by waitMs, with jitter) for a lock; BusyError when the wait runs out. */
  async acquireWithin(key: string, ttlMs: number, waitMs: number): Promise<HeldLock> {
    const deadline = Date.now() + waitMs;
    const started = Date.now();
    for (;;) {
      const held = await this.tryAcquire(key, ttlMs);
      if (held) {
        this.metrics.lockWaitSeconds.observe((Date.now() - started) / 1000);
        return held;
      }
      if (Date.now() >= deadline) throw new BusyError(`lock ${key} stayed busy for ${waitMs} ms`, this.http.retryAfterS);
      await this.backoff();
    }
  }

  /** The configured retry delay plus random jitter, so waiters do not retry in step. */
  backoffMs(): number {
    return this.config.retryDelayMs + Math.floor(Math.random() * (this.config.retryJitterMs + 1));
  }

  backoff(): Promise<void> {
    return sleep(this.backoffMs());
  }

  /** Releases; a failure is harmless (the lock expires by its TTL) and is only counted. */
  async release(held: HeldLock): Promise<void> {
    held.released = true;
    if (held.timer) clearTimeout(held.timer);
    held.timer = undefined;
    try {
      await this.redlock.release(held.lock);
    } catch {
      this.metrics.dependencyErrors.inc({ dependency: 'redis' });
    }
  }

  private scheduleExtension(held: HeldLock): void {
    // Extend at half the TTL: a slow holder keeps its lock as long as it is alive.
    held.timer = setTimeout(
      () => {
        held.timer = undefined;
        this.redlock
          .extend(held.lock, held.ttlMs)
          .then((lock) => {
            if (held.released) return;
            held.lock = lock;
            this.metrics.lockExtensions.inc();
            this.scheduleExtension(held);
          })
          .catch(() => undefined);
      },
      Math.max(10, Math.floor(held.ttlMs / 2)),
    );
    held.timer.unref();
  }

  /**
   * Reads Redlock's votes: did the attempt fail because the key is held (or might be), or because
   * too many masters are unreachable for any quorum? A master that refused the command at once
   * (disconnected: ioredis fails fast with enableOfflineQueue off) is lost. A vote that hit the
   * command timeout is lost only when its master has been silent for two REDIS_TIMEOUT_MS: on a
   * loaded machine a live master's reply, queued behind others by auto-pipelining, can miss the
   * timeout while the same master keeps answering other votes, and such an attempt is retried like
   * a busy one (nothing happened either way); a frozen master answers nothing, so an order meets
   * at most a few of its timeouts before it is answered UNAVAILABLE.
   */
  private async lockedByOther(err: unknown): Promise<boolean> {
    if (!(err instanceof ExecutionError) || err.attempts.length === 0) return false;
    const stats = await err.attempts[err.attempts.length - 1];
    const now = Date.now();
    this.heard(stats.votesFor, now);
    for (const [client, e] of stats.votesAgainst) if (e instanceof ResourceLockedError) this.lastHeard.set(client, now);
    let lost = 0;
    for (const [client, e] of stats.votesAgainst) {
      // A slot on the move (Redis Cluster resharding): nothing was taken, the master lives; retry.
      if (e instanceof ResourceLockedError || isSlotMove(e)) continue;
      if (!isTimeout(e) || this.timeoutMeansLost || now - (this.lastHeard.get(client) ?? 0) > this.silenceMs) lost += 1;
    }
    return stats.membershipSize - lost >= stats.quorumSize;
  }

  private heard(clients: Iterable<unknown>, now = Date.now()): void {
    for (const client of clients) this.lastHeard.set(client, now);
  }
}

/** ioredis's commandTimeout rejection (ioredis/built/Command.js). */
function isTimeout(err: Error): boolean {
  return err.message === 'Command timed out';
}
