// The way into the order path: one Redis script call that refuses a sold-out product, takes the
// user's order lock `lock:order:<userId>` and returns the empty-segment hints; and the way out,
// releasing that lock only if this request still holds it.
//
// The user lock lives on the hint Redis (REDIS_URL), not on the Redlock quorum: it only turns
// concurrent duplicates into a quick 409, while the unique index (product_id, user_id) is what
// makes one order per user durable. Folding it into the hint read saves a round trip per order.
// For the same reason an unreachable hint Redis does not stop orders: they go on without hints
// and without the user lock (duplicates then meet the unique index: 409 ALREADY_ORDERED), as
// long as the Redlock quorum of segment locks stands. When the hint Redis is also the only lock
// master its failure is the lock's failure: 503 UNAVAILABLE at once, rather than a second and
// third wait (segment lock, Redlock's cleanup) for the same dead or frozen server.
//
// On a Redis Cluster the user lock hashes to a slot of its own (users spread over the masters)
// while the hints share the product's: the script reads the hints, then a SET NX PX takes the
// user lock, so a sold-out refusal still costs one call. Either master being down only costs
// what it holds: the hints, or the user lock.
import { randomBytes } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import { HttpConfig, LocksConfig, RedisConfig, ResolvedRedisConfig } from '../../config/app-config';
import { OrderInProgressError, UnavailableError } from '../../common/domain-errors';
import { unreachable } from '../../common/unreachable';
import { RedisReachability } from '../../infrastructure/redis-reachability';
import { REDIS_CLIENT, RedisClient } from '../../infrastructure/redis.providers';
import { GENERATION_TTL_MS } from '../../inventory/stock-hints.service';
import { ProductInfo } from '../../inventory/product.types';
import { hintKeys, lockKeys } from '../../infrastructure/redis-keys';
import { Opening, runScript } from '../../infrastructure/redis-scripts';
import { MetricsService } from '../../metrics/metrics.service';
import type { Entry, OrderPass } from './sale';

/** What opening an order came to: begin-order's reply, or noHints when its Redis did not answer. */
type Opened = Opening | { kind: 'noHints' };

@Injectable()
export class OrderGateService {
  // Tokens only need to be unique among holders: a per-process random prefix and a counter.
  private readonly prefix = `${process.pid}.${randomBytes(6).toString('hex')}.`;
  private counter = 0;

  /** True when REDIS_URL is the one Redlock master: no order can go on without it. */
  private readonly hintRedisIsTheLock: boolean;
  /** On a Redis Cluster the user lock is taken apart from the hint script (another slot). */
  private readonly userLockApart: boolean;

  constructor(
    @Inject(REDIS_CLIENT) private readonly redis: RedisClient,
    @Inject(RedisConfig) redisConfig: ResolvedRedisConfig,
    private readonly lockConfig: LocksConfig,
    private readonly http: HttpConfig,
    private readonly metrics: MetricsService,
    private readonly reach: RedisReachability,
  ) {
    const t = redisConfig.topology;
    this.hintRedisIsTheLock = t.kind === 'standalone' && t.lockUrls.length === 1 && t.lockUrls[0] === t.url;
    this.userLockApart = t.kind === 'cluster';
  }

  /**
   * The pass to go on with, or the sold-out flag; OrderInProgressError or UnavailableError. The pass
   * is degraded when the hint Redis fails: no hints, generation null, and token null (no user lock).
   */
  async enter(product: ProductInfo, userId: string): Promise<Entry> {
    const token = this.prefix + (++this.counter).toString(36);
    const opened = await this.open(product, userId, token);
    switch (opened.kind) {
      case 'soldOut':
        this.metrics.soldOutShortCircuits.inc();
        return { kind: 'soldOut' };
      case 'inProgress':
        throw new OrderInProgressError();
      case 'open': {
        const held = this.userLockApart ? await this.takeUserLock(userId, token) : token;
        return { kind: 'open', pass: { userId, token: held, generation: opened.generation, empty: opened.empty } };
      }
      case 'noHints': {
        const held = this.userLockApart ? await this.takeUserLock(userId, token) : null;
        const pass: OrderPass = { userId, token: held, generation: null, empty: new Set<number>() };
        return { kind: 'open', pass };
      }
      default:
        return unreachable(opened);
    }
  }

  /** The begin-order script, read; noHints when its Redis failed (UnavailableError when that Redis is also the lock). */
  private async open(product: ProductInfo, userId: string, token: string): Promise<Opened> {
    const hintKeysOf = [
      hintKeys.soldOut(product.id),
      hintKeys.empty(product.id, product.layoutVersion),
      hintKeys.generation(product.id),
    ];
    const args = [token, this.lockConfig.userTtlMs, GENERATION_TTL_MS];
    // A cluster master that failed a moment ago is passed over: the order goes on without hints.
    const hintMaster = this.userLockApart ? this.reach.masterOf(hintKeysOf[0]) : '';
    if (this.reach.isDown(hintMaster)) return { kind: 'noHints' };
    try {
      const keys = this.userLockApart ? hintKeysOf : [...hintKeysOf, lockKeys.user(userId)];
      return await runScript(this.redis, 'beginOrder', keys, args);
    } catch (err) {
      this.metrics.dependencyErrors.inc({ dependency: 'redis' });
      if (!this.userLockApart) this.releaseAfterFailure(userId, token);
      if (this.hintRedisIsTheLock) throw new UnavailableError('redis', this.http.retryAfterS, err);
      this.reach.markDown(hintMaster, err);
      return { kind: 'noHints' };
    }
  }

  /** The user lock on its own (Redis Cluster): the token, or null when its master cannot be reached. */
  private async takeUserLock(userId: string, token: string): Promise<string | null> {
    const key = lockKeys.user(userId);
    const master = this.reach.masterOf(key);
    if (this.reach.isDown(master)) return null;
    let taken: string | null;
    try {
      taken = await this.redis.set(key, token, 'PX', this.lockConfig.userTtlMs, 'NX');
    } catch (err) {
      this.metrics.dependencyErrors.inc({ dependency: 'redis' });
      this.reach.markDown(master, err);
      this.releaseAfterFailure(userId, token);
      return null;
    }
    if (taken !== 'OK') throw new OrderInProgressError();
    return token;
  }

  /** Never throws: a lock that cannot be released expires after USER_LOCK_TTL_MS. */
  async leave(pass: OrderPass): Promise<void> {
    if (pass.token === null) return;
    try {
      await this.release(pass.userId, pass.token);
    } catch {
      this.metrics.dependencyErrors.inc({ dependency: 'redis' });
    }
  }

  /** Releases the user's lock if `token` holds it. */
  private release(userId: string, token: string): Promise<unknown> {
    return runScript(this.redis, 'endOrder', [lockKeys.user(userId)], [token]);
  }

  /**
   * A call that took the user's lock and failed (a timeout: the server slow or frozen) may still
   * run when its Redis answers again, taking the lock with a token this order no longer holds:
   * the buyer's next order would meet ORDER_IN_PROGRESS until USER_LOCK_TTL_MS. The release is
   * sent at once, behind that call on the same connection, so Redis runs it after the call if it
   * runs the call at all (and finds nothing to release otherwise). Not waited for: its Redis is failing.
   * (Were the connection replaced in between, the two could cross; USER_LOCK_TTL_MS still bounds that.)
   * Its own failure is not counted again: the call it follows was.
   */
  private releaseAfterFailure(userId: string, token: string): void {
    this.release(userId, token).catch(() => undefined);
  }
}
