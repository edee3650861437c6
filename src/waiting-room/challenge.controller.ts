// GET /products/:id/queue/challenge: a challenge to solve before joining the product's queue. The
// door has verified the buyer when identity is on (the challenge is then theirs alone) and counted
// the call against the budgets.
import { Controller, Get, Param, Res } from '@nestjs/common';
import { ApiBearerAuth, ApiOkResponse, ApiOperation, ApiProperty, ApiResponse, ApiTags } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';
import { NoWaitingRoomError, ProductNotFoundError } from '../common/domain-errors';
import { productIdFromPath } from '../common/ids';
import { CallerOf } from '../door/caller.decorator';
import type { Caller } from '../door/door.service';
import { ProductCatalogService } from '../inventory/product-catalog.service';
import { IssuedChallenge, ProofOfWorkService } from '../proof-of-work/proof-of-work.service';

export class ChallengeResponse implements IssuedChallenge {
  @ApiProperty({ example: 'SHA-256' })
  algorithm: string;
  @ApiProperty({ description: 'SHA-256 of salt + the secret number, hex' })
  challenge: string;
  @ApiProperty({ description: 'the secret number is at most this (the difficulty)', example: 20000 })
  maxnumber: number;
  @ApiProperty({ description: 'random, then ?p=<product>&d=<difficulty>[&u=<user>]&expires=<epoch s>&' })
  salt: string;
  @ApiProperty({ description: 'HMAC-SHA256 of the challenge by the service' })
  signature: string;
  @ApiProperty({ format: 'date-time' })
  expiresAt: string;
  @ApiProperty({ description: "the difficulty's step in force, 0 at rest" })
  step: number;
  @ApiProperty({ description: "whether the product's queue needs a solution now (its proofOfWork)" })
  required: boolean;
}

@ApiTags('waiting room')
@Controller('products/:id/queue')
export class ChallengeController {
  constructor(
    private readonly pow: ProofOfWorkService,
    private readonly catalog: ProductCatalogService,
  ) {}

  @Get('challenge')
  @ApiBearerAuth('buyer')
  @ApiOperation({
    summary:
      "A proof-of-work challenge for joining the product's queue: find the number n <= maxnumber with SHA-256(salt + n) = challenge, then join with X-Proof-Of-Work: base64 of JSON { algorithm, challenge, number, salt, signature }",
  })
  @ApiOkResponse({ type: ChallengeResponse })
  @ApiResponse({ status: 401, description: 'UNAUTHENTICATED (buyer identity on)' })
  @ApiResponse({ status: 404, description: 'PRODUCT_NOT_FOUND' })
  @ApiResponse({ status: 409, description: 'NO_WAITING_ROOM' })
  @ApiResponse({ status: 429, description: 'RATE_LIMITED, with Retry-After' })
  async challenge(
    @Param('id') id: string,
    @CallerOf() caller: Caller | undefined,
    @Res({ passthrough: true }) reply: FastifyReply,
  ): Promise<ChallengeResponse> {
    const productId = productIdFromPath(id);
    if (Number.isNaN(productId)) throw new ProductNotFoundError(0);
    const product = await this.catalog.get(productId);
    if (!product.waitingRoom) throw new NoWaitingRoomError(productId);
    const userId = caller?.kind === 'buyer' && caller.verified ? caller.userId : null;
    void reply.header('cache-control', 'no-store');
    return { ...this.pow.issue(productId, userId), required: product.proofOfWork === true };
  }
}
