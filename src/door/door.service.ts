// The door: what every buyer and shop call passes before the order path. One Fastify preHandler
// on the order routes, run before Nest's pipes and guards, because most of a flash sale's calls
// end here and each must cost about what answering nothing costs:
// 1. who calls: the shop's token, or a buyer's verified JWT (or, with buyer identity off, the
//    body's userId on POST /orders); 401 UNAUTHENTICATED, 403 IDENTITY_MISMATCH or FORBIDDEN;
// 2. POST /orders of a product this process knows is sold out: 410 SOLD_OUT, or 409
//    ALREADY_ORDERED with the orderId, from memory (SoldOutBoard), no PostgreSQL, no Redis;
// 3. how often: the user's and the address's budgets (RateLimits), 429 RATE_LIMITED.
// A refusal from memory comes before the rate limits on purpose: it costs less than counting it.
// Everything else goes on to the controllers, which read the caller from `request.caller`.
import { Inject, Injectable } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { IdentityConfig, ResolvedIdentityConfig } from '../config/app-config';
import { bearerToken, SharedSecret } from '../common/bearer';
import { DomainError, ForbiddenError, IdentityMismatchError, UnauthenticatedError } from '../common/domain-errors';
import { toErrorResponse } from '../common/all-exceptions.filter';
import { ProductCatalogService } from '../inventory/product-catalog.service';
import { SoldOutBoard } from '../inventory/sold-out-board.service';
import { MetricsService } from '../metrics/metrics.service';
import { MAX_ID, USER_ID_PATTERN } from '../common/ids';
import { BuyerIdentity } from './buyer-identity.service';
import { RateLimits } from './rate-limits.service';

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

const ORDER_FIELDS = new Set(['userId', 'productId', 'quantity']);
const SOLD_OUT_BODY = JSON.stringify({ statusCode: 410, code: 'SOLD_OUT', message: 'sold out' });
const ALREADY_ORDERED_MESSAGE = 'this user already has an order for this product';
const JSON_TYPE = 'application/json; charset=utf-8';

/** A userId as the order DTO keeps it (a positive integer as its decimal string), or null when it is not one. */
export function normalUserId(value: unknown): string | null {
  if (typeof value === 'number') return Number.isSafeInteger(value) && value > 0 ? String(value) : null;
  return typeof value === 'string' && USER_ID_PATTERN.test(value) ? value : null;
}

const isCount = (v: unknown, max: number): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= max;

@Injectable()
export class Door {
  private readonly shop: SharedSecret;
  private readonly refusedSoldOut;
  private readonly refusedAlready;
  private readonly soldOutSeconds;
  private readonly alreadySeconds;

  constructor(
    @Inject(IdentityConfig) config: ResolvedIdentityConfig,
    private readonly identity: BuyerIdentity,
    private readonly limits: RateLimits,
    private readonly board: SoldOutBoard,
    private readonly catalog: ProductCatalogService,
    private readonly metrics: MetricsService,
  ) {
    this.shop = new SharedSecret(config.shopToken);
    // Label lookups once, not per refusal.
    this.refusedSoldOut = [metrics.orders.labels('SOLD_OUT'), metrics.inProcessRefusals.labels('SOLD_OUT')] as const;
    this.refusedAlready = [metrics.orders.labels('ALREADY_ORDERED'), metrics.inProcessRefusals.labels('ALREADY_ORDERED')] as const;
    this.soldOutSeconds = metrics.orderSeconds.labels('SOLD_OUT');
    this.alreadySeconds = metrics.orderSeconds.labels('ALREADY_ORDERED');
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
          await this.ownOrShop(req);
          return;
        case '/orders/:id/pay':
          await this.shopOnly(req);
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
    const started = process.hrtime.bigint();
    const body = req.body as Record<string, unknown> | undefined;
    let userId: string | null;
    if (this.identity.enabled) {
      userId = await this.verifiedBuyer(req);
      if (body !== null && typeof body === 'object' && !Array.isArray(body)) {
        if (body.userId !== undefined && normalUserId(body.userId) !== userId) throw this.mismatch();
        body.userId = userId;
      }
    } else {
      userId = body !== null && typeof body === 'object' ? normalUserId(body.userId) : null;
    }
    if (userId !== null) req.caller = { kind: 'buyer', userId, verified: this.identity.enabled };
    if (userId !== null && this.answeredFromMemory(body as Record<string, unknown>, userId, reply, started)) return;
    const limited = await this.limits.check(userId, req.ip);
    if (limited) throw limited;
  }

  /**
   * A refusal of a product this process knows is sold out, for a well-formed body whose answer
   * would be the same on the order path (window open, quantity within the limit); else false.
   */
  private answeredFromMemory(body: Record<string, unknown>, userId: string, reply: FastifyReply, started: bigint): boolean {
    const productId = body.productId;
    if (!isCount(productId, MAX_ID)) return false;
    const product = this.catalog.peek(productId);
    if (product === undefined) return false;
    const quantity = body.quantity ?? 1;
    if (!isCount(quantity, product.limitPerUser)) return false;
    const now = Date.now();
    if ((product.startsAt !== null && now < product.startsAt) || (product.endsAt !== null && now >= product.endsAt)) return false;
    for (const key in body) if (!ORDER_FIELDS.has(key)) return false;
    const refusal = this.board.refusal(productId, userId);
    if (refusal === null) return false;
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    if (refusal.kind === 'sold_out') {
      this.refusedSoldOut[0].inc();
      this.refusedSoldOut[1].inc();
      this.soldOutSeconds.observe(seconds);
      void reply.code(410).header('content-type', JSON_TYPE).send(SOLD_OUT_BODY);
    } else {
      this.refusedAlready[0].inc();
      this.refusedAlready[1].inc();
      this.alreadySeconds.observe(seconds);
      void reply
        .code(409)
        .header('content-type', JSON_TYPE)
        .send(`{"statusCode":409,"code":"ALREADY_ORDERED","message":"${ALREADY_ORDERED_MESSAGE}","orderId":${refusal.orderId}}`);
    }
    return true;
  }

  /** GET /orders/:id and cancel: the shop (any order), or the verified buyer (their own; within the budgets). */
  private async ownOrShop(req: FastifyRequest): Promise<void> {
    if (this.isShop(req)) {
      req.caller = { kind: 'shop' };
      return;
    }
    if (!this.identity.enabled) throw this.unauthenticated('the shop token is required (buyer identity is off)');
    const userId = await this.verifiedBuyer(req);
    if (req.method === 'POST') {
      const body = req.body as Record<string, unknown> | undefined;
      if (body === undefined || body === null) req.body = { userId };
      else if (typeof body === 'object' && !Array.isArray(body)) {
        if (body.userId !== undefined && normalUserId(body.userId) !== userId) throw this.mismatch();
        body.userId = userId;
      }
    }
    req.caller = { kind: 'buyer', userId, verified: true };
    const limited = await this.limits.check(userId, req.ip);
    if (limited) throw limited;
  }

  /** Pay: the shop's backend only (after the payment went through there). */
  private async shopOnly(req: FastifyRequest): Promise<void> {
    if (this.isShop(req)) {
      req.caller = { kind: 'shop' };
      return;
    }
    if (this.identity.enabled && bearerToken(req.headers.authorization) !== null) {
      // A buyer's valid token is not enough to pay; anything else is no credential at all.
      await this.verifiedBuyer(req);
      this.metrics.authRefusals.inc({ code: 'FORBIDDEN' });
      throw new ForbiddenError("only the shop's backend may pay an order (SHOP_TOKEN)");
    }
    throw this.unauthenticated('the shop token is required to pay');
  }

  private isShop(req: FastifyRequest): boolean {
    return this.shop.matches(bearerToken(req.headers.authorization));
  }

  private async verifiedBuyer(req: FastifyRequest): Promise<string> {
    try {
      return await this.identity.userOf(bearerToken(req.headers.authorization));
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

  /** Answered here in the service's one error shape (the same mapping as AllExceptionsFilter). */
  private refuse(reply: FastifyReply, err: DomainError): void {
    const out = toErrorResponse(err);
    if (out.retryAfterS !== undefined) void reply.header('Retry-After', String(out.retryAfterS));
    if (out.body.statusCode === 401) void reply.header('WWW-Authenticate', 'Bearer');
    void reply.code(out.body.statusCode).header('content-type', JSON_TYPE).send(JSON.stringify(out.body));
  }
}
