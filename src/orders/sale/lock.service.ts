// Redlock locks (segment, user, rebalance) over the configured lock masters, with the two ways this
// service takes a lock: one try (fall over to another segment when busy) and a bounded wait; and
// the fencing token that comes with a take of a segment lock (see nextToken).
import { setTimeout as sleep } from 'node:timers/promises';
import { Inject, Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { ExecutionError, ExecutionStats, Lock, Redlock, ResourceLockedError } from '@sesamecare-oss/redlock';
import { ReplyError } from 'ioredis';
import { HttpConfig, LocksConfig, RedisConfig, ResolvedRedisConfig } from '../../config/app-config';
import { BusyError, UnavailableError } from '../../common/domain-errors';
import { unreachable } from '../../common/unreachable';
import { MetricsService } from '../../metrics/metrics.service';
import { isSlotMove } from '../../infrastructure/redis-reachability';
import { REDIS_LOCK_CLIENTS, RedisClient } from '../../infrastructure/redis.providers';
import { runScript } from '../../infrastructure/redis-scripts';

/**
 * Why a held lock stopped being this holder's before its release, as found by a failed extension:
 * expired (the extension came too late: the lock's validity had run out, e.g. a stalled event
 * loop), not_held (the masters answered, but no longer hold the key for this holder), unreachable
 * (too few masters answered for a quorum), error (anything else).
 */
export type LockLossReason = 'expired' | 'not_held' | 'unreachable' | 'error';

export interface LockLoss {
  reason: LockLossReason;
  cause: unknown;
}

/** A lock this process holds, its pending automatic extension, and whether it was lost meanwhile. */
export class HeldLock {
  released = false;
  timer?: NodeJS.Timeout;
  /**
   * Set when an extension failed: from then on the lock may lapse (or has), and another holder may
   * take it. The holder reads it when its hold ends (RedlockSegmentLocking.sellHeld).
   */
  lost: LockLoss | null = null;
  constructor(
    public lock: Lock,
    readonly key: string,
    readonly ttlMs: number,
    /**
     * The fencing token of this take (a lock taken with a fencing counter): above the token of
     * every earlier take while the masters' counters agree. PostgreSQL refuses a write whose token
     * is not above the segment's stored fence (migrations/1764470000000-SegmentFencing.ts).
     */
    readonly token: number | null = null,
  ) {}
}

/**
 * What one lock master's vote against says about that master: held (it answered: another holder
 * has the key, or, extending, it is no longer ours), slotMoved (a Redis Cluster slot on the move:
 * the master lives), refused (it answered with an error reply), disconnected (no connection to
 * it), noReply (connected, yet no reply within REDIS_TIMEOUT_MS: frozen, or slow behind others).
 */
type Dissent =
  { kind: 'held' } | { kind: 'slotMoved' } | { kind: 'refused' } | { kind: 'disconnected' } | { kind: 'noReply' };

/** ioredis exports redis-errors' ReplyError untyped; every error reply of a Redis server is one. */
const RedisReplyError = ReplyError as new (...args: never[]) => Error;

function dissentOf(err: Error, master: RedisClient): Dissent {
  if (err instanceof ResourceLockedError) return { kind: 'held' };
  if (isSlotMove(err)) return { kind: 'slotMoved' };
  if (err instanceof RedisReplyError) return { kind: 'refused' };
  // Neither a vote nor a reply: ioredis failed the command itself. With enableOfflineQueue off it
  // does so at once while disconnected, and a closing connection aborts what it carried; on a
  // connection that stays up, the one such failure is the command timeout. ioredis raises that
  // as a plain Error (Command.setTimeout in ioredis 6), no class of its own to tell it by, so the
  // connection's state does: a timeout leaves it ready, the other failures do not.
  return master.status === 'ready' ? { kind: 'noReply' } : { kind: 'disconnected' };
}

@Injectable()
export class LockService implements OnModuleInit {
  private readonly logger = new Logger(LockService.name);
  private readonly redlock: Redlock;
  private readonly masters: RedisClient[];
  /** When each lock master last answered a vote (for or against): the evidence that it lives. */
  private readonly lastHeard = new Map<RedisClient, number>();
  /** A master's PING in flight, asked whether it lives (see silent), resolving true when it answered. */
  private readonly probes = new Map<RedisClient, Promise<boolean>>();
  /** When a master last failed to answer such a PING. */
  private readonly probeFailedAt = new Map<RedisClient, number>();
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
    this.masters = clients;
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
   * timeouts; throws UnavailableError when too many masters are unreachable for a quorum. With a
   * `fenceKey`, the lock comes with a fencing token drawn from that counter (HeldLock.token).
   */
  async tryAcquire(key: string, ttlMs: number, fenceKey?: string): Promise<HeldLock | null> {
    const acquiring = this.redlock.acquire([key], ttlMs);
    const token = fenceKey === undefined ? null : this.nextToken(fenceKey);
    // Handled from the start: the token may fail before the vote is in (a try that does not take
    // the lock burns its number, and nobody awaits it then).
    token?.catch(() => undefined);
    let lock: Lock;
    try {
      lock = await acquiring;
    } catch (err) {
      if (await this.lockedByOther(err)) return null;
      this.metrics.dependencyErrors.inc({ dependency: 'redis' });
      throw new UnavailableError('redis', this.http.retryAfterS, err);
    }
    let held: HeldLock;
    try {
      held = new HeldLock(lock, key, ttlMs, token === null ? null : await token);
    } catch {
      // The masters granted the lock, so they live; their counts were late (a loaded machine) or
      // lost. A lock without its token cannot write: it is let go at once, and the try counts as
      // busy (nothing happened; the order tries again, and a lost quorum shows at its next vote).
      void this.redlock.release(lock).catch(() => undefined);
      this.metrics.dependencyErrors.inc({ dependency: 'redis' });
      return null;
    }
    if (this.config.extend) this.scheduleExtension(held);
    void lock.attempts[lock.attempts.length - 1].then((stats) => this.heard(stats.votesFor));
    return held;
  }

  /**
   * The next fencing token of a lock: an INCR of its counter on every lock master, sent in the tick
   * of the lock's own vote (Redlock sends its acquire at once), so on each master's connection it
   * follows the acquire and a take costs no extra round trip. The token is the highest count among
   * the first quorum of replies. While the masters' counters agree it is above every earlier
   * take's; when they do not (a master restarted empty, flushed, cut off while the others counted
   * on, a Cluster failover before the counter reached the replica), a holder may draw a token
   * below the segment's stored fence: PostgreSQL then refuses its write, and the holder raises
   * the counters to that fence (raiseFence). Safety never rests on the tokens: PostgreSQL accepts
   * a segment's writes in rising token order only, and the conditional writes keep I1 besides.
   */
  private nextToken(fenceKey: string): Promise<number> {
    const quorum = Math.floor(this.masters.length / 2) + 1;
    return new Promise((resolve, reject) => {
      let highest = 0;
      let counted = 0;
      let failed = 0;
      for (const master of this.masters)
        master.incr(fenceKey).then(
          (n) => {
            highest = Math.max(highest, n);
            if (++counted === quorum) resolve(highest);
          },
          (err: Error) => {
            if (++failed === this.masters.length - quorum + 1) reject(err);
          },
        );
    });
  }

  /**
   * Raises a fencing counter to a fence PostgreSQL has stored (lua/raise-fence-1.lua) on every
   * lock master that answers; a master that does not is counted and left behind (the next refusal
   * raises it again).
   */
  async raiseFence(fenceKey: string, fence: number): Promise<void> {
    await Promise.all(
      this.masters.map((master) =>
        runScript(master, 'raiseFence', [fenceKey], [fence]).catch(() =>
          this.metrics.dependencyErrors.inc({ dependency: 'redis' }),
        ),
      ),
    );
  }

  /** Waits (bounded by waitMs, with jitter) for a lock; BusyError when the wait runs out. */
  async acquireWithin(key: string, ttlMs: number, waitMs: number, fenceKey?: string): Promise<HeldLock> {
    const deadline = Date.now() + waitMs;
    const started = Date.now();
    for (;;) {
      const held = await this.tryAcquire(key, ttlMs, fenceKey);
      if (held) {
        this.metrics.lockWaitSeconds.observe((Date.now() - started) / 1000);
        return held;
      }
      if (Date.now() >= deadline)
        throw new BusyError(`lock ${key} stayed busy for ${waitMs} ms`, this.http.retryAfterS);
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
        void this.redlock.extend(held.lock, held.ttlMs).then(
          (lock) => {
            if (held.released) return;
            held.lock = lock;
            this.metrics.lockExtensions.inc();
            this.scheduleExtension(held);
          },
          (err: unknown) => this.extensionFailed(held, err),
        );
      },
      Math.max(10, Math.floor(held.ttlMs / 2)),
    );
    held.timer.unref();
  }

  /**
   * A failed extension: the lock may lapse before its holder is done, or already has. It is counted
   * by reason and told to the holder (HeldLock.lost); no further extension is tried, since a lock
   * that may be another's by now is not won back by extending it. A lock released meanwhile lost
   * nothing (its release is what the extension met).
   */
  private async extensionFailed(held: HeldLock, err: unknown): Promise<void> {
    if (held.released) return;
    const reason = await this.lossReason(err);
    held.lost = { reason, cause: err };
    this.metrics.lockExtensionFailures.inc({ reason });
    // Said in the log too: a holder that outlived its lease is the lock's own failure, and a
    // process killed later takes its metrics with it (the nemesis counts these lines).
    this.logger.warn(`lock ${held.key} lost before its holder let it go (${reason})`);
  }

  private async lossReason(err: unknown): Promise<LockLossReason> {
    if (!(err instanceof ExecutionError)) return 'error';
    // Redlock refuses at once, with no vote, to extend a lock whose validity has run out.
    if (err.attempts.length === 0) return 'expired';
    const stats = await err.attempts[err.attempts.length - 1];
    return (await this.quorumStands(stats)) ? 'not_held' : 'unreachable';
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
    return this.quorumStands(await err.attempts[err.attempts.length - 1]);
  }

  /** Whether enough masters of a failed vote are alive (by what their votes say) for a quorum. */
  private async quorumStands(stats: ExecutionStats, now = Date.now()): Promise<boolean> {
    const dissents = [...stats.votesAgainst].map(([master, err]) => ({ master, dissent: dissentOf(err, master) }));
    this.heard(stats.votesFor, now);
    for (const { master, dissent } of dissents) if (dissent.kind === 'held') this.lastHeard.set(master, now);
    const verdicts = await Promise.all(dissents.map(({ master, dissent }) => this.isLost(master, dissent, now)));
    const lost = verdicts.filter((isLost) => isLost).length;
    return stats.membershipSize - lost >= stats.quorumSize;
  }

  private async isLost(master: RedisClient, dissent: Dissent, now: number): Promise<boolean> {
    switch (dissent.kind) {
      case 'held':
      case 'slotMoved':
        return false;
      case 'refused':
      case 'disconnected':
        return true;
      case 'noReply':
        return this.timeoutMeansLost || (await this.silent(master, now));
      default:
        return unreachable(dissent);
    }
  }

  /**
   * A master whose vote timed out: frozen, or only slow? A vote it answered within silenceMs says
   * slow. Without one (the first burst after a quiet spell) a timeout alone does not say: on a
   * loaded machine a live master's reply can miss REDIS_TIMEOUT_MS, and taking it for lost told
   * orders UNAVAILABLE with two live masters of three (the quorum fault spec under two busy loops,
   * 3 orders in 1 run of 13). So the master is asked once: a PING, one in flight per master and
   * shared by every order that needs the answer. A reply means slow; none within REDIS_TIMEOUT_MS
   * means lost, and for the next silenceMs its timeouts count as lost without asking again, so a
   * frozen master costs an order at most one more timeout.
   */
  private async silent(master: RedisClient, now: number): Promise<boolean> {
    if (now - (this.lastHeard.get(master) ?? 0) <= this.silenceMs) return false;
    if (now - (this.probeFailedAt.get(master) ?? -Infinity) <= this.silenceMs) return true;
    let probe = this.probes.get(master);
    if (!probe) {
      probe = master
        .ping()
        .then(
          () => {
            this.lastHeard.set(master, Date.now());
            return true;
          },
          () => {
            this.probeFailedAt.set(master, Date.now());
            return false;
          },
        )
        .finally(() => this.probes.delete(master));
      this.probes.set(master, probe);
    }
    return !(await probe);
  }

  private heard(clients: Iterable<RedisClient>, now = Date.now()): void {
    for (const client of clients) this.lastHeard.set(client, now);
  }
}
