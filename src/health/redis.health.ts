// Terminus indicator: the hint client and every Redlock master, each pinged once, reported one by
// one (lockMasters[i] is REDIS_LOCK_URLS[i]). Ready while a quorum of lock masters answers: that
// is what orders need; the hint client only saves work (orders run without hints).
import { Inject, Injectable } from '@nestjs/common';
import { HealthIndicatorService } from '@nestjs/terminus';
import type Redis from 'ioredis';
import { REDIS_CLIENT, REDIS_LOCK_CLIENTS } from '../infrastructure/redis.providers';

type Status = 'up' | 'down';

@Injectable()
export class RedisHealthIndicator {
  constructor(
    private readonly indicators: HealthIndicatorService,
    @Inject(REDIS_CLIENT) private readonly main: Redis,
    @Inject(REDIS_LOCK_CLIENTS) private readonly lockClients: Redis[],
  ) {}

  async check(key: string) {
    const session = this.indicators.check(key);
    // A client shared by hints and a lock master (the usual single Redis) is pinged once.
    const clients = [...new Set([this.main, ...this.lockClients])];
    const pinged = new Map<Redis, Status>(
      await Promise.all(
        clients.map(async (c): Promise<[Redis, Status]> => [
          c,
          await c.ping().then(
            () => 'up' as const,
            () => 'down' as const,
          ),
        ]),
      ),
    );
    const lockMasters = this.lockClients.map((c) => pinged.get(c) as Status);
    const up = lockMasters.filter((s) => s === 'up').length;
    const quorum = Math.floor(lockMasters.length / 2) + 1;
    const details = { hints: pinged.get(this.main) as Status, lockMasters, lockQuorum: `${up} of ${lockMasters.length} up, ${quorum} needed` };
    return up >= quorum ? session.up(details) : session.down(details);
  }
}
