// Rate limits of buyer calls, per user and per client address, shared by every process of a
// deployment through Redis (rate-limiter-flexible: one atomic script per key and call, fixed
// windows). A budget `<rate>[,<burst>]` allows `burst` calls per window of burst / rate seconds
// (rounded to whole seconds, at least 1): `5` is 5 per second, `5,10` is 10 per 2 seconds.
//
// A key over its budget is blocked in this process's memory for the rest of its window, so the
// 429s that follow cost no Redis call. When Redis does not answer, each process keeps the same
// budgets on its own (in memory): a user can then get up to one budget per process, but limits
// never vanish and nobody is refused because Redis is away.
import { Inject, Injectable } from '@nestjs/common';
import { RateLimiterAbstract, RateLimiterMemory, RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { DoorConfig } from '../config/app-config';
import { REDIS_CLIENT, RedisClient } from '../infrastructure/redis.providers';
import { MetricsService } from '../metrics/metrics.service';

export interface Budget {
  points: number;
  durationS: number;
}

/** `<rate>[,<burst>]` as calls per window; null for 0 (no limit). */
export function parseBudget(spec: string): Budget | null {
  const [rate, burst] = spec.split(',').map(Number);
  if (rate === 0) return null;
  const points = burst ?? rate;
  return { points, durationS: Math.max(1, Math.round(points / rate)) };
}

/** A call over a budget: which one, and when it has room again. A plain value, not an Error: most 429s cost little, and a stack trace is most of that. */
export interface OverBudget {
  limit: 'user' | 'ip';
  retryAfterS: number;
}

interface Limit {
  name: 'user' | 'ip';
  shared: RateLimiterAbstract;
  local: RateLimiterMemory;
  /** flashsale_rate_limited_total{limit}, its label looked up once. */
  refusals: { inc(): void };
}

@Injectable()
export class RateLimitsService {
  private readonly user: Limit | null;
  private readonly ip: Limit | null;

  constructor(
    @Inject(REDIS_CLIENT) redis: RedisClient,
    config: DoorConfig,
    private readonly metrics: MetricsService,
  ) {
    const limit = (name: Limit['name'], spec: string): Limit | null => {
      const budget = parseBudget(spec);
      if (budget === null) return null;
      const common = { points: budget.points, duration: budget.durationS, keyPrefix: `rl:${name}` };
      const shared = new RateLimiterRedis({
        ...common,
        storeClient: redis,
        // Over budget: later calls in the window are refused from memory, without Redis.
        inMemoryBlockOnConsumed: budget.points + 1,
        // Disconnected: decide locally at once instead of waiting for a command to fail.
        rejectIfRedisNotReady: true,
      });
      return { name, shared, local: new RateLimiterMemory(common), refusals: metrics.rateLimited.labels(name) };
    };
    this.user = limit('user', config.rateLimitUser);
    this.ip = limit('ip', config.rateLimitIp);
  }

  get enabled(): boolean {
    return this.user !== null || this.ip !== null;
  }

  /**
   * A key this process already blocks for the rest of its window (over budget once), found without
   * a promise: most 429s of a hammering client are answered here. rate-limiter-flexible keeps that
   * block in memory but answers it only through a rejected promise; its lookup is read directly
   * where the library has it, else the call goes through check() as any other.
   */
  blockedNow(userId: string | null, ip: string): OverBudget | null {
    return (userId === null ? null : this.blocked(this.user, userId)) ?? this.blocked(this.ip, ip);
  }

  /** Null while the call is within both budgets; else the budget it is over (429 RATE_LIMITED). */
  async check(userId: string | null, ip: string): Promise<OverBudget | null> {
    if (this.ip === null) return userId === null ? null : this.consume(this.user, userId);
    if (userId === null || this.user === null) return this.consume(this.ip, ip);
    const [byUser, byIp] = await Promise.all([this.consume(this.user, userId), this.consume(this.ip, ip)]);
    return byUser ?? byIp;
  }

  private blocked(limit: Limit | null, key: string): OverBudget | null {
    const lookup = (limit?.shared as { getInMemoryBlockMsBeforeExpire?: (rlKey: string) => number } | undefined)
      ?.getInMemoryBlockMsBeforeExpire;
    if (limit === null || typeof lookup !== 'function') return null;
    const ms = lookup.call(limit.shared, limit.shared.getKey(key));
    if (!(ms > 0)) return null;
    limit.refusals.inc();
    return { limit: limit.name, retryAfterS: Math.max(1, Math.ceil(ms / 1000)) };
  }

  private async consume(limit: Limit | null, key: string): Promise<OverBudget | null> {
    if (limit === null) return null;
    try {
      await limit.shared.consume(key);
      return null;
    } catch (err) {
      if (err instanceof RateLimiterRes) return this.refused(limit, err);
      this.metrics.rateLimitStoreErrors.inc();
    }
    try {
      await limit.local.consume(key);
      return null;
    } catch (err) {
      if (err instanceof RateLimiterRes) return this.refused(limit, err);
      throw err;
    }
  }

  private refused(limit: Limit, res: RateLimiterRes): OverBudget {
    limit.refusals.inc();
    return { limit: limit.name, retryAfterS: Math.max(1, Math.ceil(res.msBeforeNext / 1000)) };
  }
}
