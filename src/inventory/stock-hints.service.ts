// Redis hints on the order path: which segments are empty (per layout version) and whether the
// product is sold out (read by OrderGateService in the same script that takes the user lock).
// Hints only save work; PostgreSQL decides every sale, and a lost or stale hint costs at most a
// wasted attempt or an authoritative read.
import { Inject, Injectable } from '@nestjs/common';
import type Redis from 'ioredis';
import { REDIS_CLIENT } from '../infrastructure/redis.providers';

const EMPTY_HINT_TTL_MS = 6 * 60 * 60 * 1000;

export const hintKeys = {
  soldOut: (productId: number) => `hint:soldout:${productId}`,
  empty: (productId: number, layoutVersion: number) => `hint:empty:${productId}:${layoutVersion}`,
};

@Injectable()
export class StockHintsService {
  constructor(@Inject(REDIS_CLIENT) private readonly redis: Redis) {}

  async markEmpty(productId: number, layoutVersion: number, segment: number): Promise<void> {
    await this.redis.markSegmentEmpty(hintKeys.empty(productId, layoutVersion), segment, EMPTY_HINT_TTL_MS);
  }

  /** Only after PostgreSQL said 0 units remain: stock never comes back (rebalance conserves it). */
  async markSoldOut(productId: number): Promise<void> {
    await this.redis.set(hintKeys.soldOut(productId), '1', 'PX', EMPTY_HINT_TTL_MS);
  }

  /** Drops the empty-segment hints of a superseded layout. */
  async forgetLayout(productId: number, layoutVersion: number): Promise<void> {
    await this.redis.del(hintKeys.empty(productId, layoutVersion));
  }
}
