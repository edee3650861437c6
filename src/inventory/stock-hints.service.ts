// Redis hints on the order path: which segments are empty (per layout version) and whether the
// product is sold out (read by OrderGateService in the same script, lua/begin-order.lua, that takes the user lock).
// Hints only save work; PostgreSQL decides every sale, and a lost or stale hint costs at most a
// wasted attempt or an authoritative read. Units come back (cancel, expiry, restock): the stock
// generation is bumped and the hints cleared, and the sold-out flag is only set by an order that
// saw the current generation, so a flag never hides returned units for longer than a failed
// clear's SOLD_OUT_TTL_MS.
import { Inject, Injectable } from '@nestjs/common';
import { hintKeys } from '../infrastructure/redis-keys';
import { runScript } from '../infrastructure/redis-scripts';
import { REDIS_CLIENT, RedisClient } from '../infrastructure/redis.providers';

const EMPTY_HINT_TTL_MS = 6 * 60 * 60 * 1000;
/** Bounds a sold-out flag whose clearing failed (Redis away when units came back). */
const SOLD_OUT_TTL_MS = 60_000;
/** A product's stock generation outlives its last return by this much (begin-order.lua starts a lost one afresh). */
export const GENERATION_TTL_MS = 24 * 60 * 60 * 1000;

@Injectable()
export class StockHintsService {
  constructor(@Inject(REDIS_CLIENT) private readonly redis: RedisClient) {}

  async markEmpty(productId: number, layoutVersion: number, segment: number): Promise<void> {
    await runScript(
      this.redis,
      'markSegmentEmpty',
      [hintKeys.empty(productId, layoutVersion)],
      [segment, EMPTY_HINT_TTL_MS],
    );
  }

  /** Only after PostgreSQL said 0 units remain, and only if no units came back since `generation` was read. */
  async markSoldOut(productId: number, generation: number): Promise<void> {
    await runScript(
      this.redis,
      'markSoldOut',
      [hintKeys.soldOut(productId), hintKeys.generation(productId)],
      [generation, SOLD_OUT_TTL_MS],
    );
  }

  /** Units came back into these segments (committed in PostgreSQL): clear what would hide them. */
  async stockReturned(productId: number, layoutVersion: number, segments: number[]): Promise<void> {
    await runScript(
      this.redis,
      'stockReturned',
      [hintKeys.soldOut(productId), hintKeys.generation(productId), hintKeys.empty(productId, layoutVersion)],
      [GENERATION_TTL_MS, ...segments],
    );
  }

  /** Drops the empty-segment hints of a superseded layout. */
  async forgetLayout(productId: number, layoutVersion: number): Promise<void> {
    await this.redis.del(hintKeys.empty(productId, layoutVersion));
  }
}
