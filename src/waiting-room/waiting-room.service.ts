// The waiting room as buyers meet it: joining a product's queue, reading a ticket, and the
// lottery's public records. A join is one row in PostgreSQL, made in a group with the joins that
// come meanwhile (one call per process per round trip), in the bucket of PostgreSQL's clock; the
// buyer gets the ticket as a signed token naming its bucket. Once the bucket is sealed and drawn,
// a poll is answered from the token and what this process knows (QueueStates: the draws and the
// admission view, refreshed every tick), with no Redis and no PostgreSQL while the ticket waits.
import { Injectable, OnModuleInit } from '@nestjs/common';
import { AdmissionsService } from '../admissions/admissions.service';
import { NoWaitingRoomError, SaleEndedError, TicketNotFoundError, UnavailableError } from '../common/domain-errors';
import { HttpConfig, WaitingRoomConfig } from '../config/app-config';
import { ProductCatalogService } from '../inventory/product-catalog.service';
import { ProductInfo } from '../inventory/product.types';
import { MetricsService } from '../metrics/metrics.service';
import { BoundedMap } from './bounded-map';
import { GroupedCalls } from '../common/grouped-calls';
import { ALGORITHM, ticketIdFor } from './lottery';
import { drawWaitUntil, QueueStates } from './queue-states';
import { TicketClaims, TicketTokens } from './ticket-tokens';
import { AdmissionBudget, Reply, saleEnded, standingOf, TicketStatus, TicketView } from './ticket-status';
import { Chain, Draw, JoinedRow, WaitingRoomRepository } from './waiting-room.repository';

export interface Fairness {
  seedHash: string;
  seed?: string;
  preQueue: number | null;
  algorithm: string;
}

/** The public record of a room's draws: every seal's outcome and the commitments of the seeds. */
export interface DrawsRecord {
  bucketMs: number;
  sealedThrough: number;
  chains: Chain[];
  draws: Draw[];
}

/** What this process remembers of a ticket between polls, to spare PostgreSQL and to measure estimates. */
interface Known {
  /** The ticket's drawn place, once known (places never change). */
  drawn?: number;
  /** Ordered or admission lapsed: nothing will change any more. */
  over?: 'ordered' | 'ended';
  /** The first admission time this process estimated for it (epoch ms), to measure the estimate's error. */
  firstEta?: number;
}

/** A ticket's entry before anything is remembered of it. */
const nothingKnown = (): Known => ({});

/** Tickets remembered per process (at most; those not read for longest go first). */
const KNOWN_MAX = 50_000;

@Injectable()
export class WaitingRoomService implements OnModuleInit {
  private ticketTokens: TicketTokens | null = null;
  private readonly known = new BoundedMap<string, Known>(KNOWN_MAX);
  private readonly joins: GroupedCalls<{ userId: string; ticketId: string }, JoinedRow>;
  /** The poll counter of each status, its label looked up once. */
  private readonly pollCounters: Record<TicketStatus, { inc(): void }>;
  private readonly budget: AdmissionBudget;

  constructor(
    private readonly http: HttpConfig,
    private readonly config: WaitingRoomConfig,
    private readonly catalog: ProductCatalogService,
    private readonly states: QueueStates,
    private readonly repo: WaitingRoomRepository,
    private readonly admissions: AdmissionsService,
    private readonly metrics: MetricsService,
  ) {
    this.joins = new GroupedCalls((productId, inputs) => this.repo.join(productId, inputs), 2000, JOIN_CALLS);
    this.budget = new AdmissionBudget(config.admissionRatio);
    const counter = (status: TicketStatus) => metrics.queuePolls.labels(status);
    this.pollCounters = {
      waiting: counter('waiting'),
      admitted: counter('admitted'),
      ordered: counter('ordered'),
      sold_out: counter('sold_out'),
      ended: counter('ended'),
    };
  }

  onModuleInit(): void {
    this.ticketTokens = new TicketTokens(this.admissions.derivedKey('queue-ticket'));
  }

  /** POST /products/:id/queue: the user's ticket, made now (created) or the one they have. */
  async join(productId: number, userId: string): Promise<{ ticket: TicketView; created: boolean }> {
    const product = await this.roomProduct(productId);
    if (product.endsAt !== null && Date.now() >= product.endsAt) throw new SaleEndedError(new Date(product.endsAt));
    if ((await this.states.room(productId)) === null) throw new NoWaitingRoomError(productId);
    const ticketId = ticketIdFor(productId, userId);
    const joined = await this.joins.take(productId, { userId, ticketId }).catch((err) => {
      this.metrics.dependencyErrors.inc({ dependency: 'postgres' });
      throw new UnavailableError('postgres', this.http.retryAfterS, err);
    });
    this.metrics.queueJoins.inc({ outcome: joined.created ? 'new' : 'existing' });
    if (joined.created) this.states.noteJoin(productId);
    const claims: TicketClaims = {
      userId,
      productId,
      ticketId,
      position: joined.position,
      bucket: joined.position === null ? joined.bucket : null,
    };
    // A new ticket's bucket is still open: its answer says to poll at once (unless nothing is left), and that poll waits for
    // the draw. A ticket joined again is looked up in its draw (made long ago, mostly).
    const ticket = await this.answer(product, this.tickets.issue(claims), claims, !joined.created);
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
    return this.answer(product, token, claims, true);
  }

  /** GET /products/:id/queue/fairness: the pre-queue's commitment, and once drawn its seed and how to check every draw. */
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

  /** GET /products/:id/queue/draws: every draw made (seeds revealed), and the chains that committed them. */
  async draws(productId: number): Promise<DrawsRecord> {
    await this.roomProduct(productId);
    const room = await this.states.room(productId);
    if (room === null) throw new NoWaitingRoomError(productId);
    const [draws, chains] = await Promise.all([
      this.states.drawsOf(productId),
      this.repo.chains(productId).catch((err) => {
        throw new UnavailableError('postgres', this.http.retryAfterS, err);
      }),
    ]);
    const view = await this.states.view(productId);
    return { bucketMs: room.bucketMs, sealedThrough: view?.sealedThrough ?? -1, chains, draws };
  }

  /** GET /products/:id/queue/draws/:bucket: one draw and its tickets' lottery ids in drawn order; null when no such draw. */
  async draw(productId: number, bucket: number): Promise<{ draw: Draw; tickets: string[] } | null> {
    await this.roomProduct(productId);
    return this.states.drawnTickets(productId, bucket);
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

  /**
   * The ticket's answer, from its claims and what this process knows. What it needs is read first:
   * its place from its bucket's draw (`wait`: the poll may wait for the draw), then the admission
   * view; the answer is then made by what they say (Reply): ended, its outcome settled, not placed
   * yet, waiting in its place, or admitted unless an order spent the admission.
   */
  private async answer(product: ProductInfo, token: string, claims: TicketClaims, wait: boolean): Promise<TicketView> {
    const reply = new Reply(product, token, claims, this.countPoll);
    if (saleEnded(product, reply.now)) return reply.told('ended', null, null);
    const known = this.known.get(claims.ticketId);
    if (known?.over) {
      reply.position = claims.position ?? known.drawn ?? null;
      return reply.told(known.over, 0, 0);
    }
    let position = claims.position ?? known?.drawn ?? null;
    let keyShare: number | null = null;
    if (position === null) {
      const bucket = claims.bucket ?? 0;
      const now = Date.now();
      // A new ticket when nothing is left to buy: said at once (a crowd that joins after the
      // sell-out learns it from its join; the view is one read per process at a time, shared). Its
      // place comes with its next poll, which waits for the draw.
      if (!wait && bucket > 0 && (await this.states.view(product.id).catch(() => null))?.unitsLeft === 0)
        return reply.told('sold_out', null, null);
      const bucketMs = (await this.states.room(product.id))?.bucketMs ?? 0;
      const until = wait ? drawWaitUntil(bucket, bucketMs, product.startsAt, now, this.config.admissionTickMs) : now;
      ({ position, keyShare } = await this.states.place(product.id, bucket, claims.ticketId, until));
    }
    // The admission view: a placed ticket's standing, or an unplaced pre-queue ticket's first poll.
    const view =
      position === null && keyShare === null
        ? null
        : (this.states.freshView(product.id) ?? (await this.states.refreshView(product.id)));
    // A place found in the draw is remembered: places never change.
    if (position !== null && claims.position === null && known?.drawn === undefined)
      this.known.getOrAdd(claims.ticketId, nothingKnown).drawn = position;
    reply.position = position;
    // The draw may have been waited for: the time from now on.
    const now = (reply.now = Date.now());
    if (saleEnded(product, now)) return reply.told('ended', null, null);
    if (position === null) return reply.unplaced(keyShare, view, this.budget);
    if (view === null) return reply.told('waiting', null, null);
    const standing = standingOf(position, view, now);
    if (standing.kind === 'queued') {
      const queued = reply.queued(position, view, this.budget, Math.ceil(this.config.admissionTickMs / 1000));
      if (queued.status === 'waiting' && queued.estimatedWaitS !== null && known?.firstEta === undefined)
        this.known.getOrAdd(claims.ticketId, nothingKnown).firstEta = now + queued.estimatedWaitS * 1000;
      return queued;
    }
    // Admitted: has an order spent it? (one index lookup, then remembered once it has)
    const spent = (await this.admissions.spentBy(product.id, position)) !== null;
    if (spent || standing.kind === 'admissionOver') {
      const over = spent ? 'ordered' : 'ended';
      this.known.getOrAdd(claims.ticketId, nothingKnown).over = over;
      return reply.told(over, 0, 0);
    }
    // Admitted, but nothing is left to buy: said plainly (the admission is handed out again if units come back).
    if (view.unitsLeft === 0) return reply.told('sold_out', 0, null);
    if (known?.firstEta !== undefined) {
      this.metrics.queueEtaError.observe(Math.abs(standing.batch.admittedAt - known.firstEta) / 1000);
      known.firstEta = undefined;
    }
    const { expiresAt } = standing;
    return {
      ...reply.told('admitted', 0, 0),
      admission: this.admissions.issue({ ...claims, position, expiresAt }),
      admissionExpiresAt: new Date(Math.floor(expiresAt / 1000) * 1000),
    };
  }

  /** Counts a poll's answer by its status. */
  private readonly countPoll = (status: TicketStatus): void => this.pollCounters[status].inc();
}

/** Joins of one product a process sends at once: PostgreSQL takes them side by side. */
const JOIN_CALLS = 2;
