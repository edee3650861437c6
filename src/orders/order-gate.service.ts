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
import { randomBytes } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type Redis from 'ioredis';
import { HttpConfig, LocksConfig, RedisConfig, ResolvedRedisConfig } from '../config/app-config';
import { OrderInProgressError, SoldOutError, UnavailableError } from '../common/domain-errors';
import { REDIS_CLIENT } from '../infrastructure/redis.providers';
import { GENERATION_TTL_MS, hintKeys } from '../inventory/stock-hints.service';
import { ProductInfo } from '../inventory/product-catalog.service';
import { lockKeys } from '../locks/lock-keys';
import { MetricsService } from '../metrics/metrics.service';

export interface Pass {
  userId: string;
  /** Null when the hint Redis was unreachable and the order goes on without a user lock. */
  token: string | null;
  /** Segments known empty in the product's current layout. */
  empty: Set<number>;
  /** The product's stock generation when the order opened; null without the hint Redis. */
  generation: number | null;
}

@Injectable()
export class OrderGateService {
  // Tokens only need to be unique among holders: a per-process random prefix and a counter.
  private readonly prefix = `${process.pid}.${randomBytes(6).toString('hex')}.`;
  private counter = 0;

  /** True when REDIS_URL is the one Redlock master: no order can go on without it. */
  private readonly hintRedisIsTheLock: boolean;

  constructor(
    @Inject(REDIS_CLIENT) private readonly redis: Redis,
    @Inject(RedisConfig) redisConfig: ResolvedRedisConfig,
    private readonly locks: LocksConfig,
    private readonly http: HttpConfig,
    private readonly metrics: MetricsService,
  ) {
    this.hintRedisIsTheLock = redisConfig.lockUrls.length === 1 && redisConfig.lockUrls[0] === redisConfig.url;
  }

  /** SoldOutError, OrderInProgressError, UnavailableError, or the pass to go on with (degraded when the hint Redis fails). */
  async enter(product: ProductInfo, userId: string, quantity: number): Promise<Pass> {
    const token = this.prefix + (++this.counter).toString(36);
    let reply: number[];
    try {
      reply = await this.redis.beginOrder(
        hintKeys.soldOut(product.id),
        lockKeys.user(userId),
        hintKeys.empty(product.id, product.layoutVersion),
        hintKeys.generation(product.id),
        token,
        this.locks.userTtlMs,
        GENERATION_TTL_MS,
      );
    } catch (err) {
      this.metrics.dependencyErrors.inc({ dependency: 'redis' });
      if (this.hintRedisIsTheLock) throw new UnavailableError('redis', this.http.retryAfterS, err);
      return { userId, token: null, empty: new Set(), generation: null };
    }
    if (reply[0] === -1) {
      this.metrics.soldOutShortCircuits.inc();
      throw new SoldOutError(0, quantity);
    }
    if (reply[0] !== 1) throw new OrderInProgressError();
    return { userId, token, generation: reply[1], empty: new Set(reply.slice(2)) };
  }

  /** Never throws: a lock that cannot be released expires after USER_LOCK_TTL_MS. */
  async leave(pass: Pass): Promise<void> {
    if (pass.token === null) return;
    try {
      await this.redis.endOrder(lockKeys.user(pass.userId), pass.token);
    } catch {
      this.metrics.dependencyErrors.inc({ dependency: 'redis' });
    }
  }
}
