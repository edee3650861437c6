// Where a product's queue lives in Redis, and every command the waiting room sends there.
//
// The queue is split so that no single hash slot carries the crowd: a control slot {wr:<product>}
// holds the epoch, the draw's result and the arrival counter, and SHARDS slots {wr:<product>:<s>}
// hold the tickets (and the pre-queue), each ticket in the shard its id hashes to. A join costs one
// script in its ticket's shard plus, after the start, a share of one arrival-number call per
// process per round trip (see ArrivalNumbers); a poll one HMGET in its ticket's shard. On a Redis
// Cluster the shards spread over the masters by their slots.
import { randomBytes } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import { REDIS_CLIENT, RedisClient } from '../infrastructure/redis.providers';

export const queueKeys = {
  control: (productId: number) => `wr:{wr:${productId}}:ctl`,
  arrivals: (productId: number) => `wr:{wr:${productId}}:arr`,
  tickets: (productId: number, shard: number) => `wr:{wr:${productId}:${shard}}:t`,
  preQueue: (productId: number, shard: number) => `wr:{wr:${productId}:${shard}}:pre`,
  closed: (productId: number, shard: number) => `wr:{wr:${productId}:${shard}}:closed`,
  mark: (productId: number, shard: number) => `wr:{wr:${productId}:${shard}}:mark`,
};

/** A queue's control values (see lua/queue-arrive.lua). */
export interface QueueControl {
  /** Changes when the control slot was lost and made again: arrival numbers restart from 0. */
  epoch: number;
  /** Positions of this epoch's tickets come after this one (0 for the first epoch). */
  base: number;
  /** Tickets drawn into this epoch's pre-queue (0 until the draw, or when the epoch began after it). */
  pre: number;
  /** Whether the pre-queue has been drawn (in this epoch or an earlier one). */
  drawn: boolean;
  shards: number;
  /** Arrival numbers given in this epoch so far. */
  arrivals: number;
}

/** A ticket as stored: `e` epoch, `k` kind ('p' pre-queue, 'a' arrival), `a` arrival number, `at` joined (epoch ms), `u` user. */
export interface TicketRecord {
  e: number;
  k: 'p' | 'a';
  a?: number;
  at: number;
  u: string;
}

export interface StoredTicket {
  record: TicketRecord;
  /** Null until known (a pre-queue ticket before the draw, an arrival before the draw's size is). */
  position: number | null;
  /** The shard's mark when the ticket was read: a process trusts what it remembers of the ticket while the mark stays. */
  mark: string | null;
  created: boolean;
}

/** Where a queue's positions stand: tickets taken so far are positions 1 .. total. */
export function positionsTaken(c: QueueControl): number {
  return c.base + c.pre + c.arrivals;
}

/** An arrival's position, once the draw says where arrivals begin. */
export function arrivalPosition(c: QueueControl, arrival: number): number | null {
  return c.drawn ? c.base + c.pre + arrival : null;
}

/**
 * Whether a stored ticket still holds its place under the current control (lua/queue-join.lua
 * decides the same): a ticket of this epoch; one of an older epoch whose position lies below where
 * this epoch's new positions begin (base, or base + pre-queue when this epoch drew it); or a
 * pre-queue ticket waiting for a draw still to come.
 */
export function stillValid(t: { record: TicketRecord; position: number | null }, c: QueueControl): boolean {
  if (t.record.e === c.epoch) return true;
  if (t.position !== null) return t.position <= c.base + c.pre;
  return t.record.k === 'p' && !c.drawn;
}

function controlOf(reply: number[]): QueueControl | null {
  if (reply[0] === -1) return null;
  const [epoch, base, pre, drawn, shards, arrivals] = reply;
  return { epoch, base, pre, drawn: drawn === 1, shards, arrivals };
}

@Injectable()
export class QueueStore {
  constructor(@Inject(REDIS_CLIENT) private readonly redis: RedisClient) {}

  /** The control values, or null when the control hash is missing. */
  async control(productId: number): Promise<QueueControl | null> {
    return controlOf(await this.redis.queueArrive(queueKeys.control(productId), queueKeys.arrivals(productId), 0));
  }

  /** Takes n arrival numbers: the control values with `arrivals` the last one taken; null when the control hash is missing. */
  async arrive(productId: number, n: number): Promise<QueueControl | null> {
    return controlOf(await this.redis.queueArrive(queueKeys.control(productId), queueKeys.arrivals(productId), n));
  }

  /** Makes the control hash unless it is there; true when this call made it. */
  async init(productId: number, c: Omit<QueueControl, 'arrivals'>): Promise<boolean> {
    const made = await this.redis.queueInit(
      queueKeys.control(productId),
      queueKeys.arrivals(productId),
      c.epoch,
      c.base,
      c.pre,
      c.drawn ? 1 : 0,
      c.shards,
    );
    return made === 1;
  }

  async join(
    productId: number,
    shard: number,
    ticketId: string,
    record: TicketRecord,
    lotteryMember: string,
    control: QueueControl,
    position: number | null,
  ): Promise<StoredTicket | 'closed'> {
    const reply = await this.redis.queueJoin(
      queueKeys.tickets(productId, shard),
      queueKeys.preQueue(productId, shard),
      queueKeys.closed(productId, shard),
      queueKeys.mark(productId, shard),
      ticketId,
      JSON.stringify(record),
      record.k,
      lotteryMember,
      control.epoch,
      control.base + control.pre,
      position === null ? '' : position,
      randomBytes(6).toString('hex'),
      control.drawn ? 1 : 0,
    );
    if (reply[0] === 2) return 'closed';
    return {
      record: JSON.parse(reply[1] as string) as TicketRecord,
      position: reply[2] ? Number(reply[2]) : null,
      mark: reply[3] ?? null,
      created: reply[0] === 1,
    };
  }

  async read(productId: number, shard: number, ticketId: string): Promise<Omit<StoredTicket, 'created'> | null> {
    const [record, position, mark] = await this.redis.queueRead(
      queueKeys.tickets(productId, shard),
      queueKeys.mark(productId, shard),
      ticketId,
    );
    if (!record) return null;
    return {
      record: JSON.parse(record) as TicketRecord,
      position: position ? Number(position) : null,
      mark: mark || null,
    };
  }

  /** Every shard's mark (null where a shard has none: never joined, or lost). */
  async marks(productId: number, shards: number): Promise<Array<string | null>> {
    return Promise.all(Array.from({ length: shards }, (_, s) => this.redis.get(queueKeys.mark(productId, s))));
  }

  /** Writes the position of an arrival that joined before the draw's size was known. */
  async setPosition(productId: number, shard: number, ticketId: string, position: number): Promise<void> {
    await this.redis.hset(queueKeys.tickets(productId, shard), `${ticketId}:pos`, position);
  }

  // ---- the draw (one process at a time, see Admitter) ----

  /** Closes every shard's pre-queue: a pre-queue join that arrives later is told to join as an arrival. */
  async closePreQueue(productId: number, shards: number): Promise<void> {
    await Promise.all(Array.from({ length: shards }, (_, s) => this.redis.set(queueKeys.closed(productId, s), '1')));
  }

  /** Up to `count` pre-queue members of a shard after `after` (exclusive; '' from the first), in lottery order. */
  async preQueueChunk(productId: number, shard: number, after: string, count: number): Promise<string[]> {
    return this.redis.zrangebylex(
      queueKeys.preQueue(productId, shard),
      after === '' ? '-' : `(${after}`,
      '+',
      'LIMIT',
      0,
      count,
    );
  }

  /** Writes drawn positions, one shard's worth per call. */
  async writePositions(productId: number, shard: number, positions: Array<[string, number]>): Promise<void> {
    if (positions.length === 0) return;
    const fields: Array<string | number> = [];
    for (const [ticketId, position] of positions) fields.push(`${ticketId}:pos`, position);
    await this.redis.hset(queueKeys.tickets(productId, shard), ...fields);
  }

  /** False when the epoch changed under the draw. */
  async markDrawn(productId: number, epoch: number, pre: number): Promise<boolean> {
    return (await this.redis.queueDrawn(queueKeys.control(productId), epoch, pre)) === 1;
  }
}
