// The body of every answer that is a product (the admin routes), as OpenAPI shows it, and
// toProductResponse: the one place a ProductView becomes that body.
import { ApiProperty } from '@nestjs/swagger';
import type { ProductView } from '../../inventory/product.types';

export class SegmentResponse {
  @ApiProperty({ example: 0 })
  index: number;

  @ApiProperty({ description: 'units left in the segment', example: 250 })
  stock: number;
}

export class ProductResponse {
  @ApiProperty({ example: 1 })
  id: number;

  @ApiProperty({ example: 'Limited sneaker' })
  name: string;

  @ApiProperty({ description: 'units ever stocked: created plus restocked' })
  stocked: number;

  @ApiProperty({ description: 'units remaining in the segments' })
  stock: number;

  @ApiProperty({ description: 'units in live orders: reserved + paid' })
  sold: number;

  @ApiProperty({ description: 'units in reserved orders, not yet paid' })
  reserved: number;

  @ApiProperty({ description: 'units in paid orders' })
  paid: number;

  @ApiProperty({ description: 'units one user may order' })
  limitPerUser: number;

  @ApiProperty({ type: String, format: 'date-time', nullable: true, description: 'when the sale opens; null for open' })
  startsAt: Date | null;

  @ApiProperty({
    type: String,
    format: 'date-time',
    nullable: true,
    description: 'when the sale closes; null for open',
  })
  endsAt: Date | null;

  @ApiProperty({ description: 'seconds a reservation waits for payment' })
  paymentTimeoutS: number;

  @ApiProperty({ description: 'whether the product sells only to buyers admitted from its queue' })
  waitingRoom: boolean;

  @ApiProperty({ description: 'seconds an admission from the queue lasts' })
  admissionTtlS: number;

  @ApiProperty({ description: 'whether joining the queue needs a solved proof-of-work challenge' })
  proofOfWork: boolean;

  @ApiProperty({
    type: String,
    nullable: true,
    description: "the shop's page the waiting page sends admitted buyers to, with the admission token",
  })
  continueUrl: string | null;

  @ApiProperty()
  segmentCount: number;

  @ApiProperty({ type: [SegmentResponse] })
  segments: SegmentResponse[];
}

/** The body of POST /admin/products/:id/rebalance: the product before and after. */
export class RebalanceResponse {
  @ApiProperty({ type: ProductResponse })
  before: ProductResponse;

  @ApiProperty({ type: ProductResponse })
  after: ProductResponse;
}

export function toProductResponse(view: ProductView): ProductResponse {
  return {
    id: view.id,
    name: view.name,
    stocked: view.stocked,
    stock: view.stock,
    sold: view.sold,
    reserved: view.reserved,
    paid: view.paid,
    limitPerUser: view.limitPerUser,
    startsAt: view.startsAt,
    endsAt: view.endsAt,
    paymentTimeoutS: view.paymentTimeoutS,
    waitingRoom: view.waitingRoom,
    admissionTtlS: view.admissionTtlS,
    proofOfWork: view.proofOfWork,
    continueUrl: view.continueUrl,
    segmentCount: view.segmentCount,
    segments: view.segments.map((s) => ({ index: s.index, stock: s.stock })),
  };
}
