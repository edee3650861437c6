// What a buyer reads of their ticket (POST /products/:id/queue and GET .../queue/:ticketId), and the
// lottery's public record (GET .../queue/fairness). One mapping function per answer.
import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import type { Fairness, TicketView } from '../waiting-room.service';

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
