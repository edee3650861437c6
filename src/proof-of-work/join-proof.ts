// The join's proof of work, as the door (src/door/door.service.ts) checks it on
// POST /products/:id/queue: after the caller is known and BEFORE the rate limits, so that a join
// without a valid solution is refused from memory (403 PROOF_REQUIRED / PROOF_INVALID) without a
// Redis command, and the single-use claim (one Redis command) is made only after the budgets let the
// join through: a 429 leaves the solution usable. Before the budgets only the terms this process
// has cached are read; when it has none (a product not asked for within PRODUCT_CACHE_MS, or one
// that does not exist), the check comes after the budgets, so a 429 costs no PostgreSQL read.
// What the join would refuse anyway (unknown product, no waiting room, proof of work off, sale
// ended, no valid userId) is let through untouched, so those refusals spend no solution either.
// Only a join whose solution was claimed counts towards the difficulty: a refusal changes nothing,
// so a flood of joins without a valid solution makes the door no harder for the buyers who solve.
import { Injectable } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import { ProductNotFoundError, ProofRequiredError } from '../common/domain-errors';
import { productIdFromPath } from '../common/ids';
import { ProductCatalogService } from '../inventory/product-catalog.service';
import { ProofOfWorkService } from './proof-of-work.service';

/** The header that carries a join's solution. */
export const PROOF_HEADER = 'x-proof-of-work';

/** Claims the verified solution (one Redis command) and counts the join; PROOF_INVALID when another join claimed it first. */
export type Claim = () => Promise<void>;

@Injectable()
export class JoinProof {
  constructor(
    private readonly pow: ProofOfWorkService,
    private readonly catalog: ProductCatalogService,
  ) {}

  /**
   * Verifies the join's solution in memory; null when the join needs none (or will be refused for
   * another reason). With `cachedOnly`, undefined when this process does not hold the product's terms
   * (the door then counts the budgets first and asks again: a 429 never costs a PostgreSQL read).
   */
  async check(req: FastifyRequest, userId: string | null, cachedOnly = false): Promise<Claim | null | undefined> {
    const productId = productIdFromPath((req.params as { id?: string }).id ?? '');
    if (Number.isNaN(productId)) return null;
    const product = cachedOnly
      ? this.catalog.peek(productId)
      : await this.catalog.get(productId).catch((err: unknown) => {
          if (err instanceof ProductNotFoundError) return null;
          throw err;
        });
    if (product === undefined) return undefined;
    const now = Date.now();
    if (product === null || !product.waitingRoom || !product.proofOfWork) return null;
    if (product.endsAt !== null && now >= product.endsAt) return null;
    const raw = req.headers[PROOF_HEADER];
    if (typeof raw !== 'string' || raw === '') {
      this.pow.required();
      throw new ProofRequiredError(productId);
    }
    if (userId === null) return null;
    const verified = this.pow.verify(raw, productId, userId, now);
    return async () => {
      await this.pow.claim(verified);
      this.pow.difficulty.count(productId, Date.now());
    };
  }
}
