// What a buyer reads of their ticket (POST /products/:id/queue and GET .../queue/:ticketId), and the
// lottery's public records (GET .../queue/fairness, .../queue/draws and .../queue/draws/:bucket).
// One mapping function per answer.
import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { ALGORITHM } from '../lottery';
import type { Draw } from '../waiting-room.repository';
import type { DrawsRecord, Fairness } from '../waiting-room.service';
import type { TicketView } from '../ticket-status';

export class TicketResponse {
  @ApiProperty({
    example:
      'eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyLTQyIiwicGlkIjoxLCJ0aWQiOiIzZjBjOWQyYWI0MWU3YzU1ZDBlMWEyYjMiLCJwb3MiOjE3LCJleHAiOjE3NjQwMDAwMDB9.c2lnbmF0dXJl',
    description:
      'the signed ticket (opaque): poll GET /products/:id/queue/{id} with it. It holds the place, so no loss of a cache can take it; joining again gives a fresh one for the same place',
  })
  id: string;
  @ApiProperty({
    example: '3f0c9d2ab41e7c55d0e1a2b3',
    description: "the ticket's id in the published lottery: 24 hex characters, the same for a user and product",
  })
  lotteryId: string;
  @ApiProperty({ example: 1 })
  productId: number;
  @ApiProperty({ example: 'user-42' })
  userId: string;
  @ApiProperty({ enum: ['waiting', 'admitted', 'ordered', 'sold_out', 'ended'] })
  status: string;
  @ApiProperty({
    type: Number,
    nullable: true,
    description:
      'the place in the queue (1 = first); null until the pre-queue is drawn at the start; never changes after',
  })
  position: number | null;
  @ApiProperty({
    type: Number,
    nullable: true,
    description: 'tickets before this one still waiting or admitted (admitted = may still order)',
  })
  ahead: number | null;
  @ApiProperty({
    type: Number,
    nullable: true,
    description:
      'seconds until admission at the admission rate measured; before the start, seconds until it; null when unknown',
  })
  estimatedWaitS: number | null;
  @ApiPropertyOptional({ description: 'while admitted: the signed admission to send as "admission" with POST /orders' })
  admission?: string;
  @ApiPropertyOptional({ description: 'while admitted: when the admission ends (its place goes to the next ticket)' })
  admissionExpiresAt?: string;
}

export function toTicketResponse(t: TicketView): TicketResponse {
  return {
    id: t.id,
    lotteryId: t.lotteryId,
    productId: t.productId,
    userId: t.userId,
    status: t.status,
    position: t.position,
    ahead: t.ahead,
    estimatedWaitS: t.estimatedWaitS,
    ...(t.admission !== undefined ? { admission: t.admission } : {}),
    ...(t.admissionExpiresAt !== undefined ? { admissionExpiresAt: t.admissionExpiresAt.toISOString() } : {}),
  };
}

export class FairnessResponse {
  @ApiProperty({ description: 'SHA-256 of the seed (hex), published from the moment the product has a waiting room' })
  seedHash: string;
  @ApiPropertyOptional({ description: 'the seed (hex), published once the pre-queue is drawn at the start' })
  seed?: string;
  @ApiProperty({ type: Number, nullable: true, description: 'tickets in the drawn pre-queue; null before the draw' })
  preQueue: number | null;
  @ApiProperty({ description: 'how to recompute the pre-queue order from the seed and the ticket ids' })
  algorithm: string;
}

export function toFairnessResponse(f: Fairness): FairnessResponse {
  return {
    seedHash: f.seedHash,
    ...(f.seed !== undefined ? { seed: f.seed } : {}),
    preQueue: f.preQueue,
    algorithm: f.algorithm,
  };
}

export class DrawResponse {
  @ApiProperty({
    description:
      'the bucket: 0 is the pre-queue, else floor(epoch ms / bucketMs) of PostgreSQL when its tickets joined',
  })
  bucket: number;
  @ApiProperty({
    type: Number,
    nullable: true,
    description: "the draw's index in the seeds' hash chains; null for a block numbered on arrival",
  })
  draw: number | null;
  @ApiProperty({ description: "the position of the bucket's first ticket in drawn order" })
  firstPosition: number;
  @ApiProperty({ description: 'tickets in the bucket' })
  tickets: number;
  @ApiProperty({ type: String, nullable: true, description: "the draw's seed (hex), revealed once it is drawn" })
  seed: string | null;
  @ApiProperty({ description: 'when the bucket was sealed (ISO 8601)' })
  drawnAt: string;
}

export class ChainResponse {
  @ApiProperty({ description: 'the first draw whose seed this chain commits' })
  firstDraw: number;
  @ApiProperty({ description: 'how many draws it commits' })
  length: number;
  @ApiProperty({ description: 'SHA-256 applied `length` times to a secret root (hex): public from madeAt on' })
  head: string;
  @ApiProperty({ description: 'when the chain was made and its head published (ISO 8601)' })
  madeAt: string;
}

export class DrawsResponse {
  @ApiProperty({ description: "the width of the room's buckets, ms of PostgreSQL's clock" })
  bucketMs: number;
  @ApiProperty({ description: 'the last bucket sealed (-1: none yet)' })
  sealedThrough: number;
  @ApiProperty({ type: [ChainResponse] })
  chains: ChainResponse[];
  @ApiProperty({ type: [DrawResponse] })
  draws: DrawResponse[];
  @ApiProperty({ description: 'how to recompute every draw' })
  algorithm: string;
}

export class DrawnBucketResponse extends DrawResponse {
  @ApiProperty({
    type: [String],
    description: "the bucket's lottery ids in drawn order: the first holds firstPosition",
  })
  lotteryIds: string[];
}

export function toDrawResponse(d: Draw): DrawResponse {
  return {
    bucket: d.bucket,
    draw: d.draw,
    firstPosition: d.first,
    tickets: d.tickets,
    seed: d.seed === null ? null : d.seed.toString('hex'),
    drawnAt: new Date(d.drawnAt).toISOString(),
  };
}

export function toDrawsResponse(r: DrawsRecord): DrawsResponse {
  return {
    bucketMs: r.bucketMs,
    sealedThrough: r.sealedThrough,
    chains: r.chains.map((c) => ({
      firstDraw: c.firstDraw,
      length: c.length,
      head: c.head.toString('hex'),
      madeAt: new Date(c.madeAt).toISOString(),
    })),
    draws: r.draws.map(toDrawResponse),
    algorithm: ALGORITHM,
  };
}
