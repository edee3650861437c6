// The door: what every buyer and shop call passes before the order path. One Fastify preHandler
// on the order and waiting-room routes, run before Nest's pipes and guards, because most of a flash sale's calls
// end here and each must cost about what answering nothing costs:
// 1. who calls: the shop's token, or a buyer's verified JWT (or, with buyer identity off, the
//    body's userId on POST /orders); 401 UNAUTHENTICATED, 403 IDENTITY_MISMATCH or FORBIDDEN;
// 2. POST /orders of a product this process knows is sold out: 410 SOLD_OUT, or 409
//    ALREADY_ORDERED with the orderId, from memory (SoldOutBoardService), no PostgreSQL, no Redis;
// 3. how often: the user's and the address's budgets (RateLimitsService), 429 RATE_LIMITED; joining a
//    waiting room, asking for its proof-of-work challenge and polling a ticket count against the
//    same budgets as orders. A join of a product that requires proof of work has its solution
//    checked in memory before the budgets (403 PROOF_REQUIRED / PROOF_INVALID, no Redis command)
//    and claimed after them (src/proof-of-work/join-proof.ts).
// 4. how busy: while this process's event loop runs too late, a call is shed with 503 OVERLOADED by
//    its class (LoadShedder): joins first, then new orders, then pay, cancel, reads of orders and
//    tickets and the event stream; before any other work, except that a new order is first
//    looked up on the sold-out board (a "no" from memory costs what a 503 costs, and tells more).
// A refusal from memory comes before the rate limits on purpose: it costs less than counting it.
// Everything else goes on to the controllers, which read the caller from `request.caller`.
import { Inject, Injectable } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { HttpConfig, IdentityConfig, ResolvedIdentityConfig } from '../config/app-config';
import { bearerToken, SharedSecret } from '../common/bearer';
import {
  AlreadyOrderedError,
  DomainError,
  ForbiddenError,
  IdentityMismatchError,
  OverloadedError,
  RateLimitedError,
  SoldOutError,
  UnauthenticatedError,
  UnavailableError,
} from '../common/domain-errors';
import { toErrorResponse } from '../common/all-exceptions.filter';
import { ProductCatalogService } from '../inventory/product-catalog.service';
import type { ProductInfo } from '../inventory/product.types';
import { Refusal, SoldOutBoardService } from '../inventory/sold-out-board.service';
import { MetricsService } from '../metrics/metrics.service';
import { MAX_ID, USER_ID_PATTERN } from '../common/ids';
import { JoinProof } from '../proof-of-work/join-proof';
import { BuyerIdentityService } from './buyer-identity.service';
import { LoadShedder, ShedClass } from './load-shedder';
import { OverBudget, RateLimitsService } from './rate-limits.service';

/**
 * Who is calling: the shop's backend (any order), a buyer whose token was verified (their own
 * orders), or a buyer named by the body alone (buyer identity off: development, or a gateway
 * in front that authenticates).
 */
export type Caller = { kind: 'shop' } | { kind: 'buyer'; userId: string; verified: boolean };

declare module 'fastify' {
  interface FastifyRequest {
    caller?: Caller;
  }
}

const ORDER_FIELDS = new Set(['userId', 'productId', 'quantity', 'admission']);
// The refusals from memory, made once from the error table as AllExceptionsFilter answers them:
// each refusal then costs a send, not an Error and its serialization.
const SOLD_OUT = toErrorResponse(new SoldOutError(0, 1)).body;
const SOLD_OUT_BODY = JSON.stringify(SOLD_OUT);
const ALREADY_ORDERED = toErrorResponse(new AlreadyOrderedError()).body;
/** ALREADY_ORDERED's body up to the orderId that each refusal ends it with. */
const ALREADY_ORDERED_HEAD = `${JSON.stringify(ALREADY_ORDERED).slice(0, -1)},"orderId":`;
/** 429 bodies by budget and Retry-After, each made once: a flood over budget repeats a few of them. */
const overBudgetBodies = new Map<string, { status: number; body: string }>();
const JSON_TYPE = 'application/json; charset=utf-8';

/** A userId as the order DTO keeps it (a positive integer as its decimal string), or null when it is not one. */
export function normalUserId(value: unknown): string | null {
  if (typeof value === 'number') return Number.isSafeInteger(value) && value > 0 ? String(value) : null;
  return typeof value === 'string' && USER_ID_PATTERN.test(value) ? value : null;
}

const isCount = (v: unknown, max: number): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= max;

@Injectable()
export class DoorService {
  private readonly shop: SharedSecret;
  private readonly refusedSoldOut;
  private readonly refusedAlready;
  private readonly retryAfterS: number;
  private readonly overloaded: OverloadedError;

  constructor(
    @Inject(IdentityConfig) config: ResolvedIdentityConfig,
    http: HttpConfig,
    private readonly shedder: LoadShedder,
    private readonly identity: BuyerIdentityService,
    private readonly limits: RateLimitsService,
    private readonly board: SoldOutBoardService,
    private readonly catalog: ProductCatalogService,
    private readonly metrics: MetricsService,
    private readonly proofs: JoinProof,
  ) {
    this.shop = new SharedSecret(config.shopToken);
    this.retryAfterS = http.retryAfterS;
    // One instance for every shed call: a shed must cost less than the work it saves.
    this.overloaded = new OverloadedError(http.retryAfterS);
    // Label lookups once, not per refusal.
    this.refusedSoldOut = [metrics.orders.labels('SOLD_OUT'), metrics.inProcessRefusals.labels('SOLD_OUT')] as const;
    this.refusedAlready = [
      metrics.orders.labels('ALREADY_ORDERED'),
      metrics.inProcessRefusals.labels('ALREADY_ORDERED'),
    ] as const;
  }

  /** The Fastify preHandler: answers the call here, or lets it through with `request.caller` set. */
  readonly preHandler = async (req: FastifyRequest, reply: FastifyReply): Promise<void> => {
    try {
      switch (req.routeOptions.url) {
        case '/orders':
          if (req.method === 'POST') await this.placing(req, reply);
          return;
        case '/orders/:id':
        case '/orders/:id/cancel':
          this.shedding('settle');
          await this.ownOrShop(req, reply);
          return;
        case '/orders/:id/pay':
          this.shedding('settle');
          this.shopOnly(req);
          return;
        case '/products/:id/queue':
          if (req.method === 'POST') {
            this.shedding('join');
            await this.joining(req, reply);
          }
          return;
        case '/products/:id/queue/challenge':
          this.shedding('join');
          await this.polling(req, reply);
          return;
        case '/products/:id/queue/:ticket':
          this.shedding('settle');
          await this.polling(req, reply);
          return;
        case '/events':
          this.shedding('settle');
          return;
        case '/products/:id/wait':
        case '/products/:id/wait/info':
          this.shedding('join');
          return;
        default:
          return;
      }
    } catch (err) {
      if (!(err instanceof DomainError)) throw err;
      this.refuse(reply, err);
    }
  };

  /** POST /orders: the buyer, then a refusal from memory, then the budgets. */
  private async placing(req: FastifyRequest, reply: FastifyReply): Promise<void> {
    const { userId, body } = this.buyerOfBody(req);
    // (A token with no body at all goes on to validation: 400.)
    if (userId !== null && body !== null && typeof body === 'object') {
      // Synchronous unless a lapsed entry waits for its renewal: no extra turn of the event loop per call.
      const answered = this.answeredFromMemory(body, userId, reply);
      if (answered === true || (answered !== false && (await answered))) return;
    }
    const admitted = this.shedder.admitsOrder();
    if (admitted === null) throw this.overloaded;
    // In flight until its answer is written or its client goes (close fires once either way).
    reply.raw.once('close', admitted.done);
    await this.withinBudget(userId, req, reply);
  }

  /** POST /products/:id/queue: the buyer (as for an order), then the budgets. With identity on the token names the user: no body is needed. */
  private async joining(req: FastifyRequest, reply: FastifyReply): Promise<void> {
    if (this.identity.enabled && (req.body === undefined || req.body === null)) req.body = {};
    const { userId } = this.buyerOfBody(req);
    // A caller this process already holds over budget is answered from memory before any hashing.
    const blocked = this.limits.enabled ? this.limits.blockedNow(userId, req.ip) : null;
    if (blocked) return this.overBudget(reply, blocked);
    let claim = await this.proofs.check(req, userId, true);
    await this.withinBudget(userId, req, reply);
    if (reply.sent) return;
    if (claim === undefined) claim = await this.proofs.check(req, userId);
    if (claim) await claim();
  }

  /** GET /products/:id/queue/:ticket: the verified buyer when identity is on (the ticket id alone otherwise), then the budgets. */
  private async polling(req: FastifyRequest, reply: FastifyReply): Promise<void> {
    let userId: string | null = null;
    if (this.identity.enabled) {
      userId = this.verifiedBuyer(req);
      req.caller = { kind: 'buyer', userId, verified: true };
    }
    await this.withinBudget(userId, req, reply);
  }

  /**
   * The buyer of a call whose body names one: with identity on, the token's user (written into the
   * body, or IDENTITY_MISMATCH when the body names another); off, the body's userId.
   */
  private buyerOfBody(req: FastifyRequest): { userId: string | null; body: Record<string, unknown> | undefined } {
    const body = req.body as Record<string, unknown> | undefined;
    let userId: string | null;
    if (this.identity.enabled) {
      userId = this.verifiedBuyer(req);
      if (body !== null && typeof body === 'object' && !Array.isArray(body)) {
        if (body.userId !== undefined && normalUserId(body.userId) !== userId) throw this.mismatch();
        body.userId = userId;
      }
    } else {
      userId = body !== null && typeof body === 'object' ? normalUserId(body.userId) : null;
    }
    if (userId !== null) req.caller = { kind: 'buyer', userId, verified: this.identity.enabled };
    return { userId, body };
  }

  private async withinBudget(userId: string | null, req: FastifyRequest, reply: FastifyReply): Promise<void> {
    if (!this.limits.enabled) return;
    const over = this.limits.blockedNow(userId, req.ip) ?? (await this.limits.check(userId, req.ip));
    if (over) this.overBudget(reply, over);
  }

  /**
   * A refusal of a product this process knows is sold out, for a well-formed body whose answer
   * would be the same on the order path (window open, quantity within the limit); else false.
   */
  private answeredFromMemory(
    body: Record<string, unknown>,
    userId: string,
    reply: FastifyReply,
  ): boolean | Promise<boolean> {
    const productId = body.productId;
    // Most calls are about a product this process does not hold as sold out: one lookup says so.
    if (!isCount(productId, MAX_ID) || !this.board.holds(productId)) return false;
    const product = this.catalog.peek(productId);
    if (product !== undefined) {
      if (!sameAnswer(body, product)) return false;
      const refusal = this.board.refusal(productId, userId);
      if (refusal !== null) return this.sendRefusal(reply, refusal);
    }
    // The entry or the product's terms (which the board's polls keep fresh) lapsed: a lagging loop
    // handles polls late. Wait for a poll sent after this request, which brings both, rather than
    // take the order path, whose reads would add to the lag.
    return this.board.confirmed(productId, userId).then((answer) => {
      const terms = this.catalog.peek(productId);
      if (answer.kind !== 'unsure' && (terms === undefined || !sameAnswer(body, terms))) return false;
      switch (answer.kind) {
        case 'changed':
          return false;
        case 'unsure':
          throw new UnavailableError('postgres', this.retryAfterS);
        default:
          return this.sendRefusal(reply, answer);
      }
    });
  }

  private sendRefusal(reply: FastifyReply, refusal: Refusal): true {
    // Counted, not timed: flashsale_order_duration_seconds covers the order path; these answers
    // take what the HTTP exchange takes (a histogram was a tenth of their CPU).
    if (refusal.kind === 'sold_out') {
      this.refusedSoldOut[0].inc();
      this.refusedSoldOut[1].inc();
      void reply.code(SOLD_OUT.statusCode).header('content-type', JSON_TYPE).send(SOLD_OUT_BODY);
    } else {
      this.refusedAlready[0].inc();
      this.refusedAlready[1].inc();
      void reply
        .code(ALREADY_ORDERED.statusCode)
        .header('content-type', JSON_TYPE)
        .send(`${ALREADY_ORDERED_HEAD}${refusal.orderId}}`);
    }
    return true;
  }

  /** GET /orders/:id and cancel: the shop (any order), or the verified buyer (their own; within the budgets). */
  private async ownOrShop(req: FastifyRequest, reply: FastifyReply): Promise<void> {
    if (this.isShop(req)) {
      req.caller = { kind: 'shop' };
      return;
    }
    if (!this.identity.enabled) throw this.unauthenticated('the shop token is required (buyer identity is off)');
    const userId = this.verifiedBuyer(req);
    if (req.method === 'POST') {
      const body = req.body as Record<string, unknown> | undefined;
      if (body === undefined || body === null) req.body = { userId };
      else if (typeof body === 'object' && !Array.isArray(body)) {
        if (body.userId !== undefined && normalUserId(body.userId) !== userId) throw this.mismatch();
        body.userId = userId;
      }
    }
    req.caller = { kind: 'buyer', userId, verified: true };
    const over = await this.limits.check(userId, req.ip);
    if (over) this.overBudget(reply, over);
  }

  /** Pay: the shop's backend only (after the payment went through there). */
  private shopOnly(req: FastifyRequest): void {
    if (this.isShop(req)) {
      req.caller = { kind: 'shop' };
      return;
    }
    if (this.identity.enabled && bearerToken(req.headers.authorization) !== null) {
      // A buyer's valid token is not enough to pay; anything else is no credential at all.
      this.verifiedBuyer(req);
      this.metrics.authRefusals.inc({ code: 'FORBIDDEN' });
      throw new ForbiddenError("only the shop's backend may pay an order (SHOP_TOKEN)");
    }
    throw this.unauthenticated('the shop token is required to pay');
  }

  /** Throws OVERLOADED when calls of this class are being shed. */
  private shedding(kind: ShedClass): void {
    if (this.shedder.sheds(kind)) throw this.overloaded;
  }

  private isShop(req: FastifyRequest): boolean {
    return this.shop.matches(bearerToken(req.headers.authorization));
  }

  private verifiedBuyer(req: FastifyRequest): string {
    try {
      return this.identity.userOf(bearerToken(req.headers.authorization));
    } catch (err) {
      this.metrics.authRefusals.inc({ code: 'UNAUTHENTICATED' });
      throw err;
    }
  }

  private unauthenticated(message: string): UnauthenticatedError {
    this.metrics.authRefusals.inc({ code: 'UNAUTHENTICATED' });
    return new UnauthenticatedError(message);
  }

  private mismatch(): IdentityMismatchError {
    this.metrics.authRefusals.inc({ code: 'IDENTITY_MISMATCH' });
    return new IdentityMismatchError();
  }

  /** 429 RATE_LIMITED, its body made from the error table the first time a budget and Retry-After come. */
  private overBudget(reply: FastifyReply, over: OverBudget): void {
    const key = `${over.limit}:${over.retryAfterS}`;
    let answer = overBudgetBodies.get(key);
    if (answer === undefined) {
      const { body } = toErrorResponse(new RateLimitedError(over.limit, over.retryAfterS));
      answer = { status: body.statusCode, body: JSON.stringify(body) };
      // Retry-After is a few whole seconds: the map stays small; the bound only guards the memory.
      if (overBudgetBodies.size >= 1000) overBudgetBodies.clear();
      overBudgetBodies.set(key, answer);
    }
    void reply
      .code(answer.status)
      .header('Retry-After', String(over.retryAfterS))
      .header('content-type', JSON_TYPE)
      .send(answer.body);
  }

  /** Answered here in the service's one error shape (the same mapping as AllExceptionsFilter). */
  private refuse(reply: FastifyReply, err: DomainError): void {
    const out = toErrorResponse(err);
    if (out.retryAfterS !== undefined) void reply.header('Retry-After', String(out.retryAfterS));
    if (out.body.statusCode === 401) void reply.header('WWW-Authenticate', 'Bearer');
    void reply.code(out.body.statusCode).header('content-type', JSON_TYPE).send(JSON.stringify(out.body));
  }
}

/** Whether a sold-out refusal is this body's answer on the order path too: the quantity within the limit, the window open, no other field. */
function sameAnswer(body: Record<string, unknown>, product: ProductInfo): boolean {
  if (!isCount(body.quantity ?? 1, product.limitPerUser)) return false;
  const now = Date.now();
  if ((product.startsAt !== null && now < product.startsAt) || (product.endsAt !== null && now >= product.endsAt))
    return false;
  for (const key in body) if (!ORDER_FIELDS.has(key)) return false;
  return true;
}
