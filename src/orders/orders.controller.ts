// POST /orders, GET /orders/:id, and an order's life: POST /orders/:id/pay and /cancel.
import { Body, Controller, Get, HttpCode, Param, Post } from '@nestjs/common';
import { ApiOperation, ApiResponse, ApiTags } from '@nestjs/swagger';
import { DomainError } from '../common/domain-errors';
import { MetricsService } from '../metrics/metrics.service';
import { OrderRow } from './orders.repository';
import { CreateOrderDto } from './dto/create-order.dto';
import { OrderOwnerDto } from './dto/order-owner.dto';
import { OrdersService } from './orders.service';

@ApiTags('orders')
@Controller('orders')
export class OrdersController {
  constructor(
    private readonly orders: OrdersService,
    private readonly metrics: MetricsService,
  ) {}

  @Post()
  @HttpCode(201)
  @ApiOperation({ summary: 'Reserve units of a product (one live order per user per product); pay before expiresAt' })
  @ApiResponse({ status: 201, description: 'the order, reserved' })
  @ApiResponse({ status: 400, description: 'VALIDATION_FAILED or QUANTITY_OVER_LIMIT' })
  @ApiResponse({ status: 403, description: 'SALE_NOT_STARTED (with Retry-After: seconds until it starts) or SALE_ENDED' })
  @ApiResponse({ status: 404, description: 'PRODUCT_NOT_FOUND' })
  @ApiResponse({ status: 409, description: 'ALREADY_ORDERED or ORDER_IN_PROGRESS' })
  @ApiResponse({ status: 410, description: 'SOLD_OUT' })
  @ApiResponse({ status: 503, description: 'BUSY or UNAVAILABLE (nothing happened) or OUTCOME_UNKNOWN (retry the same request to learn), with Retry-After' })
  async create(@Body() dto: CreateOrderDto): Promise<OrderRow> {
    const started = process.hrtime.bigint();
    let outcome = 'created';
    try {
      return await this.orders.place({ userId: dto.userId, productId: dto.productId, quantity: dto.quantity ?? 1 });
    } catch (err) {
      outcome = err instanceof DomainError ? err.code : 'INTERNAL';
      throw err;
    } finally {
      this.metrics.orders.inc({ outcome });
      this.metrics.orderSeconds.observe({ outcome }, Number(process.hrtime.bigint() - started) / 1e9);
    }
  }

  @Get(':id')
  @ApiOperation({ summary: 'One order' })
  @ApiResponse({ status: 404, description: 'ORDER_NOT_FOUND' })
  get(@Param('id') id: string): Promise<OrderRow> {
    return this.orders.get(id);
  }

  @Post(':id/pay')
  @HttpCode(200)
  @ApiOperation({ summary: "Pay a reserved order before its expiresAt (the shop's backend, after the payment went through). Idempotent" })
  @ApiResponse({ status: 200, description: 'the order, paid (also when it already was)' })
  @ApiResponse({ status: 404, description: "ORDER_NOT_FOUND (also for another user's order)" })
  @ApiResponse({ status: 409, description: 'ORDER_EXPIRED or ORDER_CANCELLED: the order was not paid' })
  @ApiResponse({ status: 503, description: 'UNAVAILABLE or BUSY (nothing changed) or OUTCOME_UNKNOWN (retry the same call to learn), with Retry-After' })
  pay(@Param('id') id: string, @Body() dto: OrderOwnerDto): Promise<OrderRow> {
    return this.orders.pay(id, dto.userId);
  }

  @Post(':id/cancel')
  @HttpCode(200)
  @ApiOperation({ summary: 'Cancel a reserved order; its units are back on sale when this answers. Idempotent' })
  @ApiResponse({ status: 200, description: 'the order, cancelled (also when it already was)' })
  @ApiResponse({ status: 404, description: "ORDER_NOT_FOUND (also for another user's order)" })
  @ApiResponse({ status: 409, description: 'ORDER_PAID or ORDER_EXPIRED: the order was not cancelled' })
  @ApiResponse({ status: 503, description: 'UNAVAILABLE or BUSY (nothing changed) or OUTCOME_UNKNOWN (retry the same call to learn), with Retry-After' })
  cancel(@Param('id') id: string, @Body() dto: OrderOwnerDto): Promise<OrderRow> {
    return this.orders.cancel(id, dto.userId);
  }
}
