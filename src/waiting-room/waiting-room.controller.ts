// The waiting room's routes: join a product's queue, read a ticket (Retry-After paces the polls),
// and the lottery's public record. The door (src/door) has already checked who calls and how often.
// Well-formed joins and polls are answered before Nest's pipeline by the same service calls
// (queue-answers.ts); these handlers answer the rest, and document the routes.
import { Body, Controller, Get, Param, Post, Res } from '@nestjs/common';
import { ApiBearerAuth, ApiHeader, ApiOkResponse, ApiOperation, ApiResponse, ApiTags } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';
import { NotFoundError, ValidationFailedError } from '../common/domain-errors';
import { ProductIdPipe } from '../common/ids';
import { CallerOf } from '../door/caller.decorator';
import type { Caller } from '../door/door.service';
import {
  DrawnBucketResponse,
  DrawsResponse,
  FairnessResponse,
  TicketResponse,
  toDrawResponse,
  toDrawsResponse,
  toFairnessResponse,
} from './dto/ticket-response.dto';
import { JoinQueueDto } from './dto/join-queue.dto';
import { paced } from './queue-answers';
import { WaitingRoomService } from './waiting-room.service';

/** `:id` of a queue path; malformed is a bad request (400), as on every product path. */
function productId(raw: string): number {
  return Number(new ProductIdPipe().transform(raw));
}

/** `:bucket` of a draw's path: a whole number (0 is the pre-queue). */
function bucketOf(raw: string): number {
  if (!/^(0|[1-9][0-9]{0,15})$/.test(raw)) throw new ValidationFailedError('the bucket must be a whole number');
  return Number(raw);
}

@ApiTags('waiting room')
@Controller('products/:id/queue')
export class WaitingRoomController {
  constructor(private readonly room: WaitingRoomService) {}

  @Post()
  @ApiBearerAuth('buyer')
  @ApiHeader({
    name: 'X-Proof-Of-Work',
    required: false,
    description:
      'a solved challenge of GET /products/:id/queue/challenge, base64 of JSON { algorithm, challenge, number, salt, signature }; required when the product has proofOfWork',
  })
  @ApiOperation({
    summary:
      "Join the product's queue: one ticket per user and product (201 made, 200 the one the user has). The ticket falls in a bucket of time (before startsAt the pre-queue); buckets are served in time order, each drawn by lottery once it ends. Its place comes with a poll once drawn",
  })
  @ApiResponse({ status: 201, type: TicketResponse, description: 'a new ticket (Retry-After: when to poll it)' })
  @ApiResponse({ status: 200, type: TicketResponse, description: 'the ticket this user already has' })
  @ApiResponse({ status: 400, description: 'VALIDATION_FAILED' })
  @ApiResponse({ status: 401, description: 'UNAUTHENTICATED (buyer identity on)' })
  @ApiResponse({
    status: 403,
    description: 'SALE_ENDED, IDENTITY_MISMATCH, or (proof of work on) PROOF_REQUIRED / PROOF_INVALID',
  })
  @ApiResponse({ status: 404, description: 'PRODUCT_NOT_FOUND' })
  @ApiResponse({ status: 409, description: 'NO_WAITING_ROOM: the product sells without a queue' })
  @ApiResponse({ status: 429, description: 'RATE_LIMITED, with Retry-After' })
  @ApiResponse({ status: 503, description: 'UNAVAILABLE (nothing was made), with Retry-After' })
  async join(
    @Param('id') id: string,
    @Body() dto: JoinQueueDto,
    @Res({ passthrough: true }) reply: FastifyReply,
  ): Promise<TicketResponse> {
    const { ticket, created } = await this.room.join(productId(id), dto.userId);
    void reply.code(created ? 201 : 200);
    return paced(reply, ticket);
  }

  @Get('fairness')
  @ApiOperation({
    summary: "The lottery's record: the seed's SHA-256 from the start, the seed once drawn, and how to check",
  })
  @ApiOkResponse({ type: FairnessResponse })
  @ApiResponse({ status: 404, description: 'PRODUCT_NOT_FOUND' })
  @ApiResponse({ status: 409, description: 'NO_WAITING_ROOM' })
  async fairness(@Param('id') id: string): Promise<FairnessResponse> {
    return toFairnessResponse(await this.room.fairness(productId(id)));
  }

  @Get('draws')
  @ApiOperation({
    summary:
      'Every draw made so far (bucket, first position, tickets, the seed revealed), the hash chains that committed the seeds before the sale, and how to check them (`npm run verify-queue`)',
  })
  @ApiOkResponse({ type: DrawsResponse })
  @ApiResponse({ status: 404, description: 'PRODUCT_NOT_FOUND' })
  @ApiResponse({ status: 409, description: 'NO_WAITING_ROOM' })
  async draws(@Param('id') id: string): Promise<DrawsResponse> {
    return toDrawsResponse(await this.room.draws(productId(id)));
  }

  @Get('draws/:bucket')
  @ApiOperation({ summary: "One draw and its tickets' lottery ids in drawn order: the first holds firstPosition" })
  @ApiOkResponse({ type: DrawnBucketResponse })
  @ApiResponse({ status: 400, description: 'VALIDATION_FAILED: the bucket is not a whole number' })
  @ApiResponse({
    status: 404,
    description: 'PRODUCT_NOT_FOUND, or NOT_FOUND: no draw of that bucket (not sealed yet, or empty)',
  })
  @ApiResponse({ status: 409, description: 'NO_WAITING_ROOM' })
  async drawn(@Param('id') id: string, @Param('bucket') bucket: string): Promise<DrawnBucketResponse> {
    const found = await this.room.draw(productId(id), bucketOf(bucket));
    if (found === null)
      throw new NotFoundError(`no draw of bucket ${bucket}: not sealed yet, or no ticket joined in it`);
    return { ...toDrawResponse(found.draw), lotteryIds: found.tickets };
  }

  @Get(':ticket')
  @ApiBearerAuth('buyer')
  @ApiOperation({
    summary:
      'Read a ticket (the signed `id` a join answered): status, position, how many are ahead, the estimated wait, and while admitted the admission to order with. Poll again after Retry-After seconds',
  })
  @ApiOkResponse({
    type: TicketResponse,
    description: 'the ticket (Retry-After: seconds until the next poll is useful)',
  })
  @ApiResponse({ status: 401, description: 'UNAUTHENTICATED (buyer identity on)' })
  @ApiResponse({
    status: 404,
    description:
      "TICKET_NOT_FOUND: not a ticket this service signed for this product (forged, expired, another product's), or another user's",
  })
  @ApiResponse({ status: 429, description: 'RATE_LIMITED, with Retry-After' })
  @ApiResponse({ status: 503, description: 'UNAVAILABLE, with Retry-After' })
  async ticket(
    @Param('id') id: string,
    @Param('ticket') ticket: string,
    @CallerOf() caller: Caller | undefined,
    @Res({ passthrough: true }) reply: FastifyReply,
  ): Promise<TicketResponse> {
    const owner = caller?.kind === 'buyer' && caller.verified ? caller.userId : undefined;
    return paced(reply, await this.room.ticket(productId(id), ticket, owner));
  }
}
