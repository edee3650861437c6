// On POST /products/:id/queue: a product that requires proof of work is joined only with a solution
// that verifies and is claimed now (403 PROOF_REQUIRED, 403 PROOF_INVALID). Runs after the door
// (which has set the verified user into the body when buyer identity is on) and before validation.
// Everything the join would refuse anyway (unknown product, no waiting room, sale ended, a body
// without a valid userId) goes on without touching the solution, so such a refusal spends nothing.
import { CanActivate, ExecutionContext, Injectable } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import { ProductNotFoundError, ProofRequiredError } from '../common/domain-errors';
import { productIdFromPath } from '../common/ids';
import { normalUserId } from '../door/door.service';
import { ProductCatalogService } from '../inventory/product-catalog.service';
import { ProofOfWorkService } from './proof-of-work.service';

/** The header that carries a join's solution. */
export const PROOF_HEADER = 'x-proof-of-work';

@Injectable()
export class ProofOfWorkGuard implements CanActivate {
  constructor(
    private readonly pow: ProofOfWorkService,
    private readonly catalog: ProductCatalogService,
  ) {}

  async canActivate(ctx: ExecutionContext): Promise<boolean> {
    const req = ctx.switchToHttp().getRequest<FastifyRequest<{ Params: { id: string } }>>();
    const productId = productIdFromPath(req.params.id);
    if (Number.isNaN(productId)) return true;
    const product = await this.catalog.get(productId).catch((err: unknown) => {
      if (err instanceof ProductNotFoundError) return null;
      throw err;
    });
    const now = Date.now();
    if (product === null || !product.waitingRoom || !product.proofOfWork) return true;
    if (product.endsAt !== null && now >= product.endsAt) return true;
    this.pow.difficulty.count(productId, now);
    const raw = req.headers[PROOF_HEADER];
    if (typeof raw !== 'string' || raw === '') throw new ProofRequiredError(productId);
    const body = req.body as { userId?: unknown } | undefined;
    const userId = body !== null && typeof body === 'object' ? normalUserId(body.userId) : null;
    if (userId === null) return true;
    await this.pow.accept(raw, productId, userId, now);
    return true;
  }
}
