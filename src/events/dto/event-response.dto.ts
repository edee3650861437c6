// What GET /events answers, for the OpenAPI document.
import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';

export class StreamEventResponse {
  @ApiProperty({
    description: 'Where this event is in the stream; read on after it with ?after=',
    example: '48213-1907',
  })
  cursor: string;

  @ApiProperty({
    enum: [
      'order.reserved',
      'order.paid',
      'order.cancelled',
      'order.expired',
      'units.returned',
      'product.created',
      'product.restocked',
      'product.rebalanced',
      'product.sold_out',
      'product.window_changed',
    ],
  })
  type: string;

  @ApiProperty()
  productId: number;

  @ApiPropertyOptional({ nullable: true, description: 'The order, for order.* events' })
  orderId: number | null;

  @ApiProperty({ description: 'When the change was made (its transaction began)', format: 'date-time' })
  at: string;

  @ApiProperty({
    description:
      'order.*: the order after the change, as GET /orders/:id shows it. units.returned: { quantity, segments, reason }. product.*: what changed',
    type: 'object',
    additionalProperties: true,
  })
  data: Record<string, unknown>;
}

export class EventPageResponse {
  @ApiProperty({ type: [StreamEventResponse] })
  events: StreamEventResponse[];

  @ApiProperty({ description: 'The cursor to read on from (the last event, or the one asked when there was none)' })
  next: string;
}
