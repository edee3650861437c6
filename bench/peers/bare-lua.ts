// The "bare-lua" benchmark peer: the design many shops pick instead of the service's. The stock
// is held in Redis (loaded once per product from PostgreSQL), one Lua script checks the buyer and
// the stock and takes the units, then one PostgreSQL INSERT writes the order. It never deducts
// stock_segments, so PostgreSQL alone cannot say what is left: audit it with auditLuaPeer (audit.ts).
// ORDER_HOLD_MS is slept between the script and the INSERT: there is no lock to hold it in.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Result } from 'ioredis';
import { projectRoot } from '../../src/infrastructure/project-root';
import { answer, created, HOLD_MS, memo, peerPool, peerRedis, query, serve, sleep } from './common';
import type { OrderRequest, PeerError } from './common';
import { luaPeerKeys } from './lua-keys';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    peerTakeStock(stockKey: string, buyersKey: string, userId: string, quantity: number): Result<number, Context>;
    peerReturnStock(
      stockKey: string,
      buyersKey: string,
      userId: string,
      quantity: number,
      forgetBuyer: '0' | '1',
    ): Result<number, Context>;
  }
}

const pool = peerPool();
const redis = peerRedis();
// Its scripts sit beside the peers' sources (bench/peers/lua/), not in lua/, which ships with the service.
const lua = (name: string) => readFileSync(join(projectRoot(__dirname), 'bench', 'peers', 'lua', name), 'utf8');
redis.defineCommand('peerTakeStock', { numberOfKeys: 2, lua: lua('peer-take-stock.lua') });
redis.defineCommand('peerReturnStock', { numberOfKeys: 2, lua: lua('peer-return-stock.lua') });

const fromRedis = () => Promise.reject(answer.unavailable('redis'));

/** limit_per_user of each product, read once; the first read also puts the product's stock into Redis. */
const products = memo((id) =>
  // What is left = what the segments were stocked with (never deducted here) - what orders hold.
  // SET NX: the first process to load wins, a later load never overwrites a live count.
  query(
    pool,
    `SELECT limit_per_user,
            (SELECT COALESCE(sum(stock), 0) FROM stock_segments WHERE product_id = $1)
              - (SELECT COALESCE(sum(quantity), 0) FROM orders WHERE product_id = $1) AS left_units
       FROM products WHERE id = $1`,
    [id],
  ).then(async ({ rows }) => {
    if (rows.length === 0) throw answer.notFound(id);
    await redis.set(luaPeerKeys.stock(id), String(rows[0].left_units), 'NX').catch(fromRedis);
    return rows[0].limit_per_user as number;
  }),
);

async function place(req: OrderRequest): Promise<object> {
  const { userId, productId, quantity } = req;
  const limitPerUser = await products.get(productId);
  if (quantity > limitPerUser) throw answer.overLimit(limitPerUser);
  const keys = [luaPeerKeys.stock(productId), luaPeerKeys.buyers(productId)] as const;
  let taken = await redis.peerTakeStock(...keys, userId, quantity).catch(fromRedis);
  if (taken === -2) {
    // Redis lost the count since this process loaded it: load again, once.
    products.forget(productId);
    await products.get(productId);
    taken = await redis.peerTakeStock(...keys, userId, quantity).catch(fromRedis);
  }
  if (taken === -1) throw answer.alreadyOrdered();
  if (taken === 0) throw answer.soldOut();
  if (taken !== 1) throw answer.busy('the stock count kept disappearing from Redis');

  if (HOLD_MS > 0) await sleep(HOLD_MS);
  try {
    const { rows } = await query(
      pool,
      `INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at)
       VALUES ($1, $2, $3, '[]'::jsonb, 'reserved', now() + make_interval(secs => (SELECT payment_timeout_s FROM products WHERE id = $1))) RETURNING id, created_at`,
      [productId, userId, quantity],
    );
    return created(req, rows[0].id, rows[0].created_at, []);
  } catch (err) {
    // query() turned the failure into the service's answer.
    const refusal = err as PeerError;
    // The units go back on sale; the buyer too, unless PostgreSQL says they hold an order already.
    const forget = refusal.code === 'ALREADY_ORDERED' ? '0' : '1';
    await redis
      .peerReturnStock(...keys, userId, quantity, forget)
      .catch(() => console.error(`could not give ${quantity} unit(s) of product ${productId} back`));
    throw refusal;
  }
}

serve({ redis, pool, order: place });
