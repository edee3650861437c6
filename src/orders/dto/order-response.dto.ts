// The body of every answer that is an order (POST /orders, GET /orders/:id, pay, cancel), as
// OpenAPI shows it, and toOrderResponse: the one place an OrderRow becomes that body, so a change
// to the row (a column, an internal field) cannot reach the API unnoticed.
import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import type { OrderRow, OrderStatus } from '../order.types';

const ORDER_STATUSES: OrderStatus[] = ['reserved', 'paid', 'cancelled', 'expired'];

export class AllocationResponse {
  @ApiProperty({ description: 'the stock segment the units were taken from', example: 3 })
  segment: number;

  @ApiProperty({ minimum: 1, example: 1 })
  quantity: number;
}

export class OrderResponse {
  @ApiProperty({ example: 41 })
  id: number;

  @ApiProperty({ example: 1 })
  productId: number;

  @ApiProperty({ example: 'user-42' })
  userId: string;

  @ApiProperty({ minimum: 1, example: 1 })
  quantity: number;

  @ApiProperty({
    type: [AllocationResponse],
    description: 'where the units came from: one segment, or several when no single one held them',
  })
  allocations: AllocationResponse[];

  @ApiProperty({ enum: ORDER_STATUSES, example: 'reserved' })
  status: OrderStatus;

  @ApiProperty({ type: String, format: 'date-time' })
  createdAt: Date;

  @ApiProperty({
    type: String,
    format: 'date-time',
    description: 'a reserved order not paid by then expires and its units go back on sale',
  })
  expiresAt: Date;

  @ApiPropertyOptional({ type: String, format: 'date-time', description: 'present once paid' })
  paidAt?: Date;

  @ApiPropertyOptional({ type: String, format: 'date-time', description: 'present once cancelled or expired' })
  closedAt?: Date;
}

/** The body for an order; paidAt and closedAt are absent, not null, until they happen. */
export function toOrderResponse(row: OrderRow): OrderResponse {
  return {
    id: row.id,
    productId: row.productId,
    userId: row.userId,
    quantity: row.quantity,
    allocations: row.allocations.map((a) => ({ segment: a.segment, quantity: a.quantity })),
    status: row.status,
    createdAt: row.createdAt,
    expiresAt: row.expiresAt,
    ...(row.paidAt ? { paidAt: row.paidAt } : {}),
    ...(row.closedAt ? { closedAt: row.closedAt } : {}),
  };
}
