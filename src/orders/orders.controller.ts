// POST /orders and GET /orders/:id.
import { Body, Controller, Get, HttpCode, Param, Post } from '@nestjs/common';
import { ApiOperation, ApiResponse, ApiTags } from '@nestjs/swagger';
import { DomainError } from '../common/domain-errors';
import { MetricsService } from '../metrics/metrics.service';
import { OrderRow } from './orders.repository';
import { CreateOrderDto } from './dto/create-order.dto';
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
  @ApiOperation({ summary: 'Order a product (one order per user per product)' })
  @ApiResponse({ status: 201, description: 'the order' })
  @ApiResponse({ status: 400, description: 'VALIDATION_FAILED or QUANTITY_OVER_LIMIT' })
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
}
