// Admin API: create, view, change, restock and rebalance products. Every call needs the admin bearer token.
// Every answer that is a product goes out through toProductResponse.
import { Body, Controller, Get, HttpCode, Param, Patch, Post, UseGuards } from '@nestjs/common';
import { ApiBearerAuth, ApiCreatedResponse, ApiOkResponse, ApiOperation, ApiResponse, ApiTags } from '@nestjs/swagger';
import { ProductIdPipe } from '../common/ids';
import { InventoryService } from '../inventory/inventory.service';
import { AdminTokenGuard } from './admin-token.guard';
import { CreateProductDto } from './dto/create-product.dto';
import { ProductResponse, RebalanceResponse, toProductResponse } from './dto/product-response.dto';
import { RebalanceDto } from './dto/rebalance.dto';
import { RestockDto } from './dto/restock.dto';
import { UpdateProductDto } from './dto/update-product.dto';

@ApiTags('admin')
@ApiBearerAuth('admin')
@UseGuards(AdminTokenGuard)
@ApiResponse({ status: 401, description: 'UNAUTHENTICATED: no valid admin token' })
@Controller('admin/products')
export class AdminController {
  constructor(private readonly inventory: InventoryService) {}

  @Post()
  @HttpCode(201)
  @ApiOperation({ summary: 'Create a product with its stock split evenly into segments, and its sale terms' })
  @ApiCreatedResponse({ type: ProductResponse, description: 'the product' })
  @ApiResponse({ status: 400, description: 'VALIDATION_FAILED (also endsAt not after startsAt)' })
  async create(@Body() dto: CreateProductDto): Promise<ProductResponse> {
    const view = await this.inventory.create({
      name: dto.name,
      stock: dto.stock,
      segments: dto.segments,
      limitPerUser: dto.limitPerUser ?? 1,
      startsAt: dto.startsAt ?? null,
      endsAt: dto.endsAt ?? null,
      paymentTimeoutS: dto.paymentTimeoutS ?? 900,
      waitingRoom: dto.waitingRoom ?? false,
      admissionTtlS: dto.admissionTtlS ?? 120,
      proofOfWork: dto.proofOfWork ?? false,
      continueUrl: dto.continueUrl ?? null,
    });
    return toProductResponse(view);
  }

  @Get(':id')
  @ApiOperation({ summary: 'A product: remaining, sold, and stock per segment' })
  @ApiOkResponse({ type: ProductResponse, description: 'the product' })
  @ApiResponse({
    status: 400,
    description: 'VALIDATION_FAILED (also a product id that is not an integer from 1 to 2147483647)',
  })
  @ApiResponse({ status: 404, description: 'PRODUCT_NOT_FOUND' })
  async view(@Param('id', ProductIdPipe) id: string): Promise<ProductResponse> {
    return toProductResponse(await this.inventory.view(Number(id)));
  }

  @Patch(':id')
  @ApiOperation({
    summary:
      "Change a product's name, limit per user, sale window, payment timeout or waiting room (reserved orders keep their expiresAt)",
  })
  @ApiOkResponse({ type: ProductResponse, description: 'the product, changed' })
  @ApiResponse({ status: 400, description: 'VALIDATION_FAILED (also endsAt not after startsAt once merged)' })
  @ApiResponse({
    status: 400,
    description: 'VALIDATION_FAILED (also a product id that is not an integer from 1 to 2147483647)',
  })
  @ApiResponse({ status: 404, description: 'PRODUCT_NOT_FOUND' })
  async update(@Param('id', ProductIdPipe) id: string, @Body() dto: UpdateProductDto): Promise<ProductResponse> {
    const change = Object.fromEntries(Object.entries(dto).filter(([, v]) => v !== undefined));
    return toProductResponse(await this.inventory.update(Number(id), change));
  }

  @Post(':id/restock')
  @HttpCode(200)
  @ApiOperation({ summary: 'Add units, filled into the smallest segments; clears the sold-out state' })
  @ApiOkResponse({ type: ProductResponse, description: 'the product, restocked' })
  @ApiResponse({
    status: 400,
    description: 'VALIDATION_FAILED (also a product id that is not an integer from 1 to 2147483647)',
  })
  @ApiResponse({ status: 404, description: 'PRODUCT_NOT_FOUND' })
  @ApiResponse({
    status: 503,
    description:
      'BUSY: the segments stayed locked for REBALANCE_WAIT_MS (nothing added); UNAVAILABLE: PostgreSQL is down',
  })
  async restock(@Param('id', ProductIdPipe) id: string, @Body() dto: RestockDto): Promise<ProductResponse> {
    return toProductResponse(await this.inventory.restock(Number(id), dto.units));
  }

  @Post(':id/rebalance')
  @HttpCode(200)
  @ApiOperation({ summary: 'Redistribute the remaining units evenly, optionally over a new number of segments' })
  @ApiOkResponse({ type: RebalanceResponse, description: 'the product before and after' })
  @ApiResponse({
    status: 503,
    description: 'BUSY: the segments stayed locked for REBALANCE_WAIT_MS; UNAVAILABLE: PostgreSQL is down',
  })
  async rebalance(@Param('id', ProductIdPipe) id: string, @Body() dto: RebalanceDto): Promise<RebalanceResponse> {
    const { before, after } = await this.inventory.rebalance(Number(id), dto.segments);
    return { before: toProductResponse(before), after: toProductResponse(after) };
  }
}
