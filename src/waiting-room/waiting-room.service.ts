// The waiting room as buyers meet it: joining a product's queue, reading a ticket, the lottery's
// public record, and the check the order path makes of an admission. Each answer is built from what
// this process already knows (QueueStates, refreshed every tick) plus at most one Redis command in
// the ticket's shard; PostgreSQL is read only for tickets whose admission may have been spent.
import { Injectable, OnModuleInit } from '@nestjs/common';
import { HttpConfig, WaitingRoomConfig } from '../config/app-config';
import {
  AdmissionInvalidError,
  AdmissionRequiredError,
  NoWaitingRoomError,
  SaleEndedError,
  TicketNotFoundError,
  UnavailableError,
} from '../common/domain-errors';
import { ProductCatalogService } from '../inventory/product-catalog.service';
import { ProductInfo } from '../inventory/product.types';
import { MetricsService } from '../metrics/metrics.service';
import { AdmissionTokens } from './admission-tokens';
import { ArrivalNumbers, ControlMissing } from './arrival-numbers';
import { ALGORITHM, lotteryKey, shardOf, TICKET_ID, ticketIdFor } from './lottery';
import { arrivalPosition, QueueControl, QueueStore, stillValid, StoredTicket, TicketRecord } from './queue.store';
import { QueueStates } from './queue-states.service';
import { pollAfterS, SaleWindow, standingOf, TicketStatus, waitingOf } from './ticket-status';
import { WaitingRoomRepository } from './waiting-room.repository';

export interface TicketView {
  id: string;
  productId: number;
  userId: string;
  status: TicketStatus;
  position: number | null;
  ahead: number | null;
  estimatedWaitS: number | null;
  admission?: string;
  admissionExpiresAt?: Date;
  /** Seconds until the next poll is useful (sent as Retry-After, not in the body). */
  retryAfterS: number;
}

export interface Fairness {
  seedHash: string;
  seed?: string;
  preQueue: number | null;
  algorithm: string;
}

/** What this process remembers of a ticket between polls: positions never change, so most polls need no Redis. */
interface Known {
  record: TicketRecord;
  position: number | null;
  /** The shard's mark when the ticket was read (see QueueStates.mark). */
  mark: string | null;
  /** Ordered or admission expired: nothing will change any more. */
  over?: 'ordered' | 'ended';
  /** The first admission time this process estimated for it (epoch ms), to measure the estimate's error. */
  firstEta?: number;
}

/** Tickets remembered per process; the oldest go first (a poll then costs one HMGET again). */
const KNOWN_MAX = 50_000;

@Injectable()
export class WaitingRoomService implements OnModuleInit {
  private tokens: AdmissionTokens | null = null;
  private readonly known = new Map<string, Known>();
  private readonly numbers: ArrivalNumbers;

  constructor(
    private readonly config: WaitingRoomConfig,
    private readonly http: HttpConfig,
    private readonly catalog: ProductCatalogService,
    private readonly store: QueueStore,
    private readonly states: QueueStates,
    private readonly repo: WaitingRoomRepository,
    private readonly metrics: MetricsService,
  ) {
    this.numbers = new ArrivalNumbers((productId, n) => this.store.arrive(productId, n));
  }

  async onModuleInit(): Promise<void> {
    const key = this.config.secret
      ? Buffer.from(this.config.secret, 'utf8')
      : await this.repo.sharedSecret('admission-token-key');
    this.tokens = new AdmissionTokens(key);
  }

  private get signer(): AdmissionTokens {
    if (this.tokens === null) throw new Error('the admission key is not loaded yet');
    return this.tokens;
  }

  /** POST /products/:id/queue: the user's ticket, made now (created) or the one they have. */
  async join(productId: number, userId: string): Promise<{ ticket: TicketView; created: boolean }> {
    const product = await this.roomProduct(productId);
    const now = Date.now();
    if (product.endsAt !== null && now >= product.endsAt) throw new SaleEndedError(new Date(product.endsAt));
    const room = await this.states.room(productId);
    if (room === null) throw new NoWaitingRoomError(productId);
    const ticketId = ticketIdFor(productId, userId);
    let control = await this.currentControl(productId);
    const shard = shardOf(ticketId, control.shards);
    const stored = await this.redis(async () => {
      const had = await this.store.read(productId, shard, ticketId);
      if (had && stillValid(had, control)) return { ...had, created: false };
      const joinedAt = Date.now();
      if (product.startsAt !== null && joinedAt < product.startsAt) {
        const record: TicketRecord = { e: control.epoch, k: 'p', at: joinedAt, u: userId };
        const member = `${lotteryKey(room.seed, ticketId)}:${ticketId}`;
        const pre = await this.store.join(productId, shard, ticketId, record, member, control, null);
        if (pre !== 'closed') return pre;
      }
      const taken = await this.arrivalNumber(productId);
      control = taken.control;
      const record: TicketRecord = { e: control.epoch, k: 'a', a: taken.arrival, at: joinedAt, u: userId };
      const made = await this.store.join(
        productId,
        shard,
        ticketId,
        record,
        '',
        control,
        arrivalPosition(control, taken.arrival),
      );
      if (made === 'closed') throw new Error('an arrival was refused as a pre-queue join');
      return made;
    });
    this.metrics.queueJoins.inc({ outcome: stored.created ? 'new' : 'existing' });
    this.known.delete(ticketId);
    const ticket = await this.answer(product, ticketId, stored, control);
    return { ticket, created: stored.created };
  }

  /** GET /products/:id/queue/:ticketId; `owner` is the verified buyer when identity is on. */
  async ticket(productId: number, ticketId: string, owner: string | undefined): Promise<TicketView> {
    if (!TICKET_ID.test(ticketId)) throw new TicketNotFoundError();
    if (owner !== undefined && ticketIdFor(productId, owner) !== ticketId) throw new TicketNotFoundError();
    const product = await this.roomProduct(productId).catch((err) => {
      if (err instanceof NoWaitingRoomError) throw new TicketNotFoundError();
      throw err;
    });
    const control = await this.currentControl(productId);
    const shard = shardOf(ticketId, control.shards);
    let known = this.known.get(ticketId);
    const mark = this.states.mark(productId, shard);
    // Remembered tickets are answered without Redis while their shard is known to be the one they were read from.
    if (!known || !mark || known.mark !== mark || (known.position === null && control.drawn)) {
      const read = await this.redis(() => this.store.read(productId, shard, ticketId));
      if (read === null) {
        this.known.delete(ticketId);
        throw new TicketNotFoundError();
      }
      known = { ...known, ...read };
    }
    if (!stillValid(known, control)) {
      this.known.delete(ticketId);
      throw new TicketNotFoundError('the queue was lost and made again since this ticket was taken: join again');
    }
    return this.answer(product, ticketId, { ...known, created: false }, control, known);
  }

  /** GET /products/:id/queue/fairness: the commitment, and once drawn the seed and how to check the draw. */
  async fairness(productId: number): Promise<Fairness> {
    await this.roomProduct(productId);
    let room = await this.states.room(productId);
    if (room !== null && room.preQueue === null) room = await this.states.refreshRoom(productId);
    if (room === null) throw new NoWaitingRoomError(productId);
    return {
      seedHash: room.seedHash,
      // Published once the draw is made: before it, knowing the seed would let a late joiner pick ids.
      ...(room.preQueue !== null ? { seed: room.seed.toString('hex') } : {}),
      preQueue: room.preQueue,
      algorithm: ALGORITHM,
    };
  }

  /**
   * The order path's check for a product with a waiting room: the queue position a valid admission
   * carries, not yet spent by an order. ADMISSION_REQUIRED or ADMISSION_INVALID otherwise.
   */
  async admissionFor(product: ProductInfo, userId: string, admission: string | undefined): Promise<number> {
    if (admission === undefined) throw new AdmissionRequiredError(product.id);
    const a = this.signer.verify(admission, userId, product.id);
    const spent = await this.repo.spentBy(product.id, a.position).catch((err) => {
      throw new UnavailableError('postgres', this.http.retryAfterS, err);
    });
    if (spent !== null) throw new AdmissionInvalidSpent(spent);
    return a.position;
  }

  private async roomProduct(productId: number): Promise<ProductInfo> {
    const product = await this.catalog.get(productId);
    if (!product.waitingRoom) throw new NoWaitingRoomError(productId);
    return product;
  }

  /**
   * The control values, read again when PostgreSQL knows another epoch than this process does (the
   * queue was made again since its last tick): a ticket is never judged by a past epoch's base.
   */
  private async currentControl(productId: number): Promise<QueueControl> {
    const control = await this.states.control(productId);
    const view = await this.states.view(productId);
    return view !== null && view.epoch !== control.epoch ? this.states.readControl(productId) : control;
  }

  private async arrivalNumber(productId: number): Promise<{ control: QueueControl; arrival: number }> {
    try {
      return await this.numbers.take(productId);
    } catch (err) {
      if (!(err instanceof ControlMissing)) throw err;
      await this.states.readControl(productId);
      return this.numbers.take(productId);
    }
  }

  private async redis<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (err) {
      if (err instanceof UnavailableError) throw err;
      this.metrics.dependencyErrors.inc({ dependency: 'redis' });
      throw new UnavailableError('redis', this.http.retryAfterS, err);
    }
  }

  /** The ticket's answer; remembers what will not change. */
  private async answer(
    product: ProductInfo,
    ticketId: string,
    stored: StoredTicket,
    control: QueueControl,
    known?: Known,
  ): Promise<TicketView> {
    const now = Date.now();
    const window: SaleWindow = {
      startsAt: product.startsAt,
      endsAt: product.endsAt,
      admissionTtlS: product.admissionTtlS,
    };
    let position = stored.position;
    if (position === null && stored.record.k === 'a' && stored.record.a !== undefined) {
      position = arrivalPosition(control, stored.record.a);
      if (position !== null) {
        const pos = position;
        // Kept in Redis for after an epoch change; a failed write only costs this computation again.
        void this.store
          .setPosition(product.id, shardOf(ticketId, control.shards), ticketId, pos)
          .catch(() => undefined);
      }
    }
    const entry: Known = known ?? { record: stored.record, position, mark: stored.mark };
    entry.position = position;
    this.remember(ticketId, entry);
    const base = { id: ticketId, productId: product.id, userId: stored.record.u, position };
    const ended = product.endsAt !== null && now >= product.endsAt;
    const view = position === null ? null : await this.states.view(product.id);

    if (ended) return this.counted({ ...base, status: 'ended', ahead: null, estimatedWaitS: null }, window, now);
    if (entry.over) return this.counted({ ...base, status: entry.over, ahead: 0, estimatedWaitS: 0 }, window, now);
    if (position !== null && view !== null) {
      const standing = standingOf(position, view, now);
      switch (standing.kind) {
        case 'queued':
          break;
        case 'admitted': {
          if ((await this.spent(product.id, position)) !== null) {
            entry.over = 'ordered';
            return this.counted({ ...base, status: 'ordered', ahead: 0, estimatedWaitS: 0 }, window, now);
          }
          if (entry.firstEta !== undefined) {
            this.metrics.queueEtaError.observe(Math.abs(standing.batch.admittedAt - entry.firstEta) / 1000);
            entry.firstEta = undefined;
          }
          const admission = this.signer.issue({
            userId: stored.record.u,
            productId: product.id,
            ticketId,
            position,
            expiresAt: standing.batch.expiresAt,
          });
          return this.counted(
            {
              ...base,
              status: 'admitted',
              ahead: 0,
              estimatedWaitS: 0,
              admission,
              admissionExpiresAt: new Date(Math.floor(standing.batch.expiresAt / 1000) * 1000),
            },
            window,
            now,
          );
        }
        case 'admissionOver':
          entry.over = (await this.spent(product.id, position)) !== null ? 'ordered' : 'ended';
          return this.counted({ ...base, status: entry.over, ahead: 0, estimatedWaitS: 0 }, window, now);
      }
    }
    const waiting = waitingOf(position, view, window, now);
    if (
      waiting.status === 'waiting' &&
      waiting.estimatedWaitS !== null &&
      position !== null &&
      entry.firstEta === undefined
    )
      entry.firstEta = now + waiting.estimatedWaitS * 1000;
    return this.counted({ ...base, ...waiting }, window, now);
  }

  private spent(productId: number, position: number): Promise<string | null> {
    return this.repo.spentBy(productId, position).catch((err) => {
      throw new UnavailableError('postgres', this.http.retryAfterS, err);
    });
  }

  private counted(t: Omit<TicketView, 'retryAfterS'>, window: SaleWindow, now: number): TicketView {
    this.metrics.queuePolls.inc({ status: t.status });
    return { ...t, retryAfterS: pollAfterS(t.status, t.estimatedWaitS, window, now) };
  }

  private remember(ticketId: string, entry: Known): void {
    if (!this.known.has(ticketId) && this.known.size >= KNOWN_MAX) {
      const oldest = this.known.keys().next().value;
      if (oldest !== undefined) this.known.delete(oldest);
    }
    this.known.set(ticketId, entry);
  }
}

/** ADMISSION_INVALID for an admission an order has spent. */
class AdmissionInvalidSpent extends AdmissionInvalidError {
  constructor(orderId: string) {
    super(`it was spent by order ${orderId}`);
  }
}
