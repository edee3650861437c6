// The waiting room as buyers meet it: joining a product's queue, reading a ticket, and the
// lottery's public record. A join is one row in PostgreSQL, made in a group with the joins that
// come meanwhile (one call per process per round trip); the buyer gets the ticket as a signed token
// holding its place, so a poll is answered from the token and what this process knows (QueueStates,
// refreshed every tick), with no Redis and no PostgreSQL while the ticket waits.
import { Injectable, OnModuleInit } from '@nestjs/common';
import { AdmissionsService } from '../admissions/admissions.service';
import { NoWaitingRoomError, SaleEndedError, TicketNotFoundError, UnavailableError } from '../common/domain-errors';
import { HttpConfig, WaitingRoomConfig } from '../config/app-config';
import { ProductCatalogService } from '../inventory/product-catalog.service';
import { ProductInfo } from '../inventory/product.types';
import { MetricsService } from '../metrics/metrics.service';
import { BoundedMap } from './bounded-map';
import { GroupedCalls } from '../common/grouped-calls';
import { ALGORITHM, lotteryKey, shareOfKey, ticketIdFor } from './lottery';
import { PreQueuePlace, QueueStates } from './queue-states';
import { TicketClaims, TicketTokens } from './ticket-tokens';
import { admissionsDue, firstPollWave, Pace, pollAfterS, standingOf, TicketStatus, waitingOf } from './ticket-status';
import { JoinedRow, JoinInput, WaitingRoomRepository } from './waiting-room.repository';

export interface TicketView {
  /** The signed ticket: what the buyer polls with. */
  id: string;
  /** The ticket's id in the published lottery. */
  lotteryId: string;
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

/** What this process remembers of a ticket between polls, to spare PostgreSQL and to measure estimates. */
interface Known {
  /** A pre-queue ticket's drawn place, once known (places never change). */
  drawn?: number;
  /** Ordered or admission lapsed: nothing will change any more. */
  over?: 'ordered' | 'ended';
  /** The first admission time this process estimated for it (epoch ms), to measure the estimate's error. */
  firstEta?: number;
}

/** Tickets remembered per process (at most; those not read for longest go first). */
const KNOWN_MAX = 50_000;

@Injectable()
export class WaitingRoomService implements OnModuleInit {
  private ticketTokens: TicketTokens | null = null;
  private readonly known = new BoundedMap<string, Known>(KNOWN_MAX);
  private readonly joins: GroupedCalls<JoinInput, JoinedRow>;
  private readonly pollCounters = new Map<TicketStatus, { inc(): void }>();

  constructor(
    private readonly http: HttpConfig,
    private readonly config: WaitingRoomConfig,
    private readonly catalog: ProductCatalogService,
    private readonly states: QueueStates,
    private readonly repo: WaitingRoomRepository,
    private readonly admissions: AdmissionsService,
    private readonly metrics: MetricsService,
  ) {
    // Pre-queue joins and arrivals go in separate groups (key: product x 2, + 1 for arrivals).
    this.joins = new GroupedCalls((key, inputs) => this.repo.join(key >> 1, (key & 1) === 1, inputs));
  }

  onModuleInit(): void {
    this.ticketTokens = new TicketTokens(this.admissions.derivedKey('queue-ticket'));
  }

  /** POST /products/:id/queue: the user's ticket, made now (created) or the one they have. */
  async join(productId: number, userId: string): Promise<{ ticket: TicketView; created: boolean }> {
    const product = await this.roomProduct(productId);
    const now = Date.now();
    if (product.endsAt !== null && now >= product.endsAt) throw new SaleEndedError(new Date(product.endsAt));
    const room = await this.states.room(productId);
    if (room === null) throw new NoWaitingRoomError(productId);
    const ticketId = ticketIdFor(productId, userId);
    // Before the start by this process's clock, a pre-queue join; PostgreSQL turns it into an
    // arrival if the pre-queue was drawn already.
    const arrival = product.startsAt === null || now >= product.startsAt;
    const key = arrival ? null : Buffer.from(lotteryKey(room.seed, ticketId), 'hex');
    const joined = await this.joins
      .take(productId * 2 + (arrival ? 1 : 0), { userId, ticketId, lotteryKey: key })
      .catch((err) => {
        this.metrics.dependencyErrors.inc({ dependency: 'postgres' });
        throw new UnavailableError('postgres', this.http.retryAfterS, err);
      });
    this.metrics.queueJoins.inc({ outcome: joined.created ? 'new' : 'existing' });
    if (joined.created) this.states.noteJoin(productId);
    const claims: TicketClaims = { userId, productId, ticketId, position: joined.position };
    // The key's share is passed on: a pre-queue ticket's answer paces its first poll by it.
    const share = key === null ? undefined : shareOfKey(key);
    const ticket = await this.answer(product, this.tickets.issue(claims), claims, share);
    return { ticket, created: joined.created };
  }

  /** GET /products/:id/queue/:ticket; `owner` is the verified buyer when identity is on. */
  async ticket(productId: number, token: string, owner: string | undefined): Promise<TicketView> {
    const claims = this.tickets.verify(token, productId);
    if (owner !== undefined && claims.userId !== owner) throw new TicketNotFoundError();
    // A poll is the crowd's commonest call: the product from memory when it is there, without a turn of the event loop.
    const cached = this.catalog.peek(productId);
    const product =
      cached?.waitingRoom === true
        ? cached
        : await this.roomProduct(productId).catch((err) => {
            if (err instanceof NoWaitingRoomError) throw new TicketNotFoundError();
            throw err;
          });
    return this.answer(product, token, claims);
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

  private get tickets(): TicketTokens {
    if (this.ticketTokens === null) throw new Error('the ticket key is not loaded yet');
    return this.ticketTokens;
  }

  private async roomProduct(productId: number): Promise<ProductInfo> {
    const product = await this.catalog.get(productId);
    if (!product.waitingRoom) throw new NoWaitingRoomError(productId);
    return product;
  }

  /** The ticket's answer, from its claims and what this process knows. */
  private async answer(
    product: ProductInfo,
    token: string,
    claims: TicketClaims,
    /** The ticket's lottery key's share when the caller has it (see keyShare), else computed where needed. */
    share?: number,
  ): Promise<TicketView> {
    let now = Date.now();
    // What this process remembers of the ticket, made only when there is something to remember.
    let entry = this.known.get(claims.ticketId);
    const remember = (): Known => {
      if (entry === undefined) this.known.set(claims.ticketId, (entry = {}));
      return entry;
    };
    // A pre-queue ticket's place comes from the draw: found once, then remembered.
    let position = claims.position ?? entry?.drawn ?? null;
    let preQueue: PreQueuePlace | null = null;
    if (position === null) {
      const started =
        (product.startsAt === null || now >= product.startsAt) && (product.endsAt === null || now < product.endsAt);
      preQueue = await this.states.preQueuePlace(product.id, claims.userId, claims.ticketId, started, share);
      position = preQueue.position;
      if (position !== null) remember().drawn = position;
      // After the start it may have waited for the draw (QueueStates.firstAdmission).
      now = Date.now();
    }
    const ended = product.endsAt !== null && now >= product.endsAt;
    // The admission view, from memory when fresh (not needed once the ticket's outcome is settled).
    const view =
      position === null || ended || entry?.over
        ? null
        : (this.states.freshView(product.id) ?? (await this.states.refreshView(product.id)));
    // Before the start, a pre-queue ticket's first poll after it is timed by its lottery key.
    let wave: number | null = null;
    if (preQueue?.view && preQueue.keyShare !== null && product.startsAt !== null && now < product.startsAt) {
      const firstAdmission = admissionsDue(this.config.admissionRatio, preQueue.view.unitsLeft, 0);
      wave = firstPollWave(preQueue.keyShare, preQueue.view.preJoined, firstAdmission);
    }
    // Every answer is built by this one function: a poll is the crowd's commonest call, so no
    // intermediate objects (it was a tenth of a poll's CPU in the garbage collector).
    const told = (
      status: TicketStatus,
      ahead: number | null,
      estimatedWaitS: number | null,
      pace: Pace = null,
    ): TicketView => {
      this.pollsAnswered(status).inc();
      return {
        id: token,
        lotteryId: claims.ticketId,
        productId: product.id,
        userId: claims.userId,
        status,
        position,
        ahead,
        estimatedWaitS,
        retryAfterS: pollAfterS(status, estimatedWaitS, product, now, pace, wave),
      };
    };

    if (ended) return told('ended', null, null);
    if (entry?.over) return told(entry.over, 0, 0);
    if (position !== null && view !== null) {
      const standing = standingOf(position, view, now);
      if (standing.kind !== 'queued') {
        // Admitted: has an order spent it? (one index lookup, then remembered once it has)
        const spent = (await this.admissions.spentBy(product.id, position)) !== null;
        if (spent || standing.kind === 'admissionOver') {
          const over = spent ? 'ordered' : 'ended';
          remember().over = over;
          return told(over, 0, 0);
        }
        // Admitted, but nothing is left to buy: said plainly (the admission is handed out again if units come back).
        if (view.unitsLeft === 0) return told('sold_out', 0, null);
        if (entry?.firstEta !== undefined) {
          this.metrics.queueEtaError.observe(Math.abs(standing.batch.admittedAt - entry.firstEta) / 1000);
          entry.firstEta = undefined;
        }
        const { expiresAt } = standing;
        return {
          ...told('admitted', 0, 0),
          admission: this.admissions.issue({ ...claims, position, expiresAt }),
          admissionExpiresAt: new Date(Math.floor(expiresAt / 1000) * 1000),
        };
      }
    }
    const reach =
      view === null
        ? 0
        : view.admittedThrough + admissionsDue(this.config.admissionRatio, view.unitsLeft, view.outstanding);
    const waiting = waitingOf(position, view, product, now, reach, Math.ceil(this.config.admissionTickMs / 1000));
    if (
      waiting.status === 'waiting' &&
      waiting.estimatedWaitS !== null &&
      position !== null &&
      entry?.firstEta === undefined
    )
      remember().firstEta = now + waiting.estimatedWaitS * 1000;
    const pace: Pace =
      position === null
        ? 'awaitingDraw'
        : view !== null &&
            position > view.admittedThrough + admissionsDue(this.config.admissionRatio, view.unitsLeft, 0)
          ? 'behindUnitsLeft'
          : null;
    return told(waiting.status, waiting.ahead, waiting.estimatedWaitS, pace);
  }

  /** The poll counter of one status, its label looked up once. */
  private pollsAnswered(status: TicketStatus) {
    let counter = this.pollCounters.get(status);
    if (counter === undefined) this.pollCounters.set(status, (counter = this.metrics.queuePolls.labels(status)));
    return counter;
  }
}
