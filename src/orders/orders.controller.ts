// POST /orders, GET /orders/:id, and an order's life: POST /orders/:id/pay and /cancel. Every
// answer that is an order goes out through toOrderResponse.
import { Body, Controller, Get, HttpCode, Param, Post } from '@nestjs/common';
import { ApiBearerAuth, ApiCreatedResponse, ApiOkResponse, ApiOperation, ApiResponse, ApiTags } from '@nestjs/swagger';
import { DomainError, OrderNotFoundError } from '../common/domain-errors';
import { OrderIdPipe } from '../common/ids';
import { CallerOf } from '../door/caller.decorator';
import type { Caller } from '../door/door.service';
import { MetricsService } from '../metrics/metrics.service';
import { CreateOrderDto } from './dto/create-order.dto';
import { OrderOwnerDto } from './dto/order-owner.dto';
import { OrderResponse, toOrderResponse } from './dto/order-response.dto';
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
  @ApiBearerAuth('buyer')
  @ApiOperation({ summary: 'Reserve units of a product (one live order per user per product); pay before expiresAt' })
  @ApiCreatedResponse({ type: OrderResponse, description: 'the order, reserved' })
  @ApiResponse({ status: 400, description: 'VALIDATION_FAILED or QUANTITY_OVER_LIMIT' })
  @ApiResponse({
    status: 401,
    description: 'UNAUTHENTICATED: buyer identity is on and the JWT is missing, malformed, expired or badly signed',
  })
  @ApiResponse({
    status: 403,
    description:
      "SALE_NOT_STARTED (with Retry-After: seconds until it starts), SALE_ENDED, IDENTITY_MISMATCH (the body's userId is not the token's sub), ADMISSION_REQUIRED (the product has a waiting room) or ADMISSION_INVALID (forged, expired, spent, another user's or product's, or sent to a product without a waiting room)",
  })
  @ApiResponse({ status: 404, description: 'PRODUCT_NOT_FOUND' })
  @ApiResponse({ status: 409, description: 'ALREADY_ORDERED or ORDER_IN_PROGRESS' })
  @ApiResponse({ status: 410, description: 'SOLD_OUT' })
  @ApiResponse({ status: 429, description: "RATE_LIMITED: over the user's or the address's budget, with Retry-After" })
  @ApiResponse({
    status: 503,
    description:
      'BUSY or UNAVAILABLE (nothing happened) or OUTCOME_UNKNOWN (retry the same request to learn), with Retry-After',
  })
  async create(@Body() dto: CreateOrderDto): Promise<OrderResponse> {
    const started = process.hrtime.bigint();
    let outcome = 'created';
    try {
      return toOrderResponse(
        await this.orders.place(
          { userId: dto.userId, productId: dto.productId, quantity: dto.quantity ?? 1 },
          dto.admission,
        ),
      );
    } catch (err) {
      outcome = err instanceof DomainError ? err.code : 'INTERNAL';
      throw err;
    } finally {
      this.metrics.orders.inc({ outcome });
      this.metrics.orderSeconds.observe({ outcome }, Number(process.hrtime.bigint() - started) / 1e9);
    }
  }

  @Get(':id')
  @ApiBearerAuth('shop')
  @ApiBearerAuth('buyer')
  @ApiOperation({ summary: "One order: any, with the shop's token; a buyer's own, with their JWT" })
  @ApiOkResponse({ type: OrderResponse, description: 'the order' })
  @ApiResponse({ status: 400, description: 'VALIDATION_FAILED: the id is not a positive integer' })
  @ApiResponse({ status: 401, description: 'UNAUTHENTICATED: neither the shop token nor a valid buyer JWT' })
  @ApiResponse({ status: 404, description: "ORDER_NOT_FOUND (also another user's order, for a buyer)" })
  @ApiResponse({ status: 429, description: 'RATE_LIMITED (buyers), with Retry-After' })
  async get(@Param('id', OrderIdPipe) id: string, @CallerOf() caller: Caller | undefined): Promise<OrderResponse> {
    const order = await this.orders.get(id);
    // The door lets only the shop or a verified buyer through; a buyer sees their own orders alone.
    if (caller?.kind !== 'shop' && order.userId !== (caller?.kind === 'buyer' ? caller.userId : undefined))
      throw new OrderNotFoundError(id);
    return toOrderResponse(order);
  }

  @Post(':id/pay')
  @HttpCode(200)
  @ApiBearerAuth('shop')
  @ApiOperation({
    summary:
      "Pay a reserved order before its expiresAt (the shop's backend, after the payment went through). Idempotent",
  })
  @ApiOkResponse({ type: OrderResponse, description: 'the order, paid (also when it already was)' })
  @ApiResponse({ status: 401, description: 'UNAUTHENTICATED: no shop token' })
  @ApiResponse({ status: 403, description: "FORBIDDEN: a buyer's token cannot pay" })
  @ApiResponse({ status: 404, description: "ORDER_NOT_FOUND (also for another user's order)" })
  @ApiResponse({ status: 409, description: 'ORDER_EXPIRED or ORDER_CANCELLED: the order was not paid' })
  @ApiResponse({
    status: 503,
    description:
      'UNAVAILABLE or BUSY (nothing changed) or OUTCOME_UNKNOWN (retry the same call to learn), with Retry-After',
  })
  async pay(@Param('id', OrderIdPipe) id: string, @Body() dto: OrderOwnerDto): Promise<OrderResponse> {
    return toOrderResponse(await this.orders.pay(id, dto.userId));
  }

  @Post(':id/cancel')
  @HttpCode(200)
  @ApiBearerAuth('shop')
  @ApiBearerAuth('buyer')
  @ApiOperation({ summary: 'Cancel a reserved order; its units are back on sale when this answers. Idempotent' })
  @ApiOkResponse({ type: OrderResponse, description: 'the order, cancelled (also when it already was)' })
  @ApiResponse({ status: 401, description: 'UNAUTHENTICATED: neither the shop token nor a valid buyer JWT' })
  @ApiResponse({ status: 403, description: "IDENTITY_MISMATCH: a buyer naming another user's userId" })
  @ApiResponse({ status: 404, description: "ORDER_NOT_FOUND (also for another user's order)" })
  @ApiResponse({ status: 409, description: 'ORDER_PAID or ORDER_EXPIRED: the order was not cancelled' })
  @ApiResponse({
    status: 503,
    description:
      'UNAVAILABLE or BUSY (nothing changed) or OUTCOME_UNKNOWN (retry the same call to learn), with Retry-After',
  })
  async cancel(@Param('id', OrderIdPipe) id: string, @Body() dto: OrderOwnerDto): Promise<OrderResponse> {
    return toOrderResponse(await this.orders.cancel(id, dto.userId));
  }
}
