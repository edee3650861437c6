// Terminus indicator: every Redis client (hints and each Redlock master) answers PING in time.
import { Inject, Injectable } from '@nestjs/common';
import { HealthIndicatorService } from '@nestjs/terminus';
import type Redis from 'ioredis';
import { REDIS_CLIENT, REDIS_LOCK_CLIENTS } from '../infrastructure/redis.providers';

@Injectable()
export class RedisHealthIndicator {
  constructor(
    private readonly indicators: HealthIndicatorService,
    @Inject(REDIS_CLIENT) private readonly main: Redis,
    @Inject(REDIS_LOCK_CLIENTS) private readonly lockClients: Redis[],
  ) {}

  async check(key: string) {
    const session = this.indicators.check(key);
    const clients = [this.main, ...this.lockClients.filter((c) => c !== this.main)];
    const results = await Promise.all(
      clients.map((c) =>
        c.ping().then(
          () => 'up',
          () => 'down',
        ),
      ),
    );
    const masters: Record<string, unknown> = results.length === 1 ? { redis: results[0] } : { hints: results[0], lockMasters: results.slice(1) };
    const lockUp = results.length === 1 ? results[0] === 'up' : results.slice(1).filter((r) => r === 'up').length > (results.length - 1) / 2;
    // Orders need the hint client and a Redlock quorum; one lost master of three is still ready.
    return results[0] === 'up' && lockUp ? session.up(masters) : session.down(masters);
  }
}
