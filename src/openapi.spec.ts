// The OpenAPI document as /docs-json serves it, built in this process from the real controllers
// (their services faked: building the document calls none of them): every answer that is an order
// a product or a ticket names its response schema, and those schemas say what the bodies hold.
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, NestFastifyApplication } from '@nestjs/platform-fastify';
import type { OpenAPIObject } from '@nestjs/swagger';
import { HealthCheckService, TypeOrmHealthIndicator } from '@nestjs/terminus';
import { AdminController } from './admin/admin.controller';
import { AdminConfig } from './config/app-config';
import { HealthController } from './health/health.controller';
import { RedisHealthIndicator } from './health/redis.health';
import { InventoryService } from './inventory/inventory.service';
import { MetricsService } from './metrics/metrics.service';
import { openApiDocument } from './openapi';
import { OrdersController } from './orders/orders.controller';
import { OrdersService } from './orders/orders.service';
import { ProductCatalogService } from './inventory/product-catalog.service';
import { ChallengeController } from './waiting-room/challenge.controller';
import { ProofOfWorkService } from './proof-of-work/proof-of-work.service';
import { WaitPageController } from './wait-page/wait-page.controller';
import { WaitingRoomController } from './waiting-room/waiting-room.controller';
import { WaitingRoomService } from './waiting-room/waiting-room.service';

@Module({
  controllers: [
    OrdersController,
    AdminController,
    HealthController,
    WaitingRoomController,
    ChallengeController,
    WaitPageController,
  ],
  providers: [
    { provide: ProofOfWorkService, useValue: {} },
    { provide: ProductCatalogService, useValue: {} },
    { provide: OrdersService, useValue: {} },
    { provide: WaitingRoomService, useValue: {} },
    { provide: InventoryService, useValue: {} },
    { provide: MetricsService, useValue: {} },
    { provide: AdminConfig, useValue: { token: 'an-admin-token-of-16+' } },
    { provide: HealthCheckService, useValue: {} },
    { provide: TypeOrmHealthIndicator, useValue: {} },
    { provide: RedisHealthIndicator, useValue: {} },
  ],
})
class ControllersOnly {}

/** The schema a route's answer with `status` refers to, by name. */
function responseSchema(
  doc: OpenAPIObject,
  path: string,
  method: 'get' | 'post' | 'patch',
  status: string,
): string | undefined {
  const response = doc.paths[path]?.[method]?.responses?.[status] as
    { content?: Record<string, { schema?: { $ref?: string } }> } | undefined;
  return response?.content?.['application/json']?.schema?.$ref?.replace('#/components/schemas/', '');
}

describe('OpenAPI document', () => {
  let app: NestFastifyApplication;
  let doc: OpenAPIObject;

  beforeAll(async () => {
    app = await NestFactory.create<NestFastifyApplication>(ControllersOnly, new FastifyAdapter(), {
      logger: false,
      abortOnError: false,
    });
    doc = openApiDocument(app);
  });
  afterAll(async () => {
    await app?.close();
  });

  it('should name OrderResponse as the answer of POST /orders (201), GET /orders/:id, pay and cancel (200)', () => {
    expect(responseSchema(doc, '/orders', 'post', '201')).toBe('OrderResponse');
    expect(responseSchema(doc, '/orders/{id}', 'get', '200')).toBe('OrderResponse');
    expect(responseSchema(doc, '/orders/{id}/pay', 'post', '200')).toBe('OrderResponse');
    expect(responseSchema(doc, '/orders/{id}/cancel', 'post', '200')).toBe('OrderResponse');
  });

  it('should name ProductResponse as the answer of every admin product route, and RebalanceResponse for a rebalance', () => {
    expect(responseSchema(doc, '/admin/products', 'post', '201')).toBe('ProductResponse');
    expect(responseSchema(doc, '/admin/products/{id}', 'get', '200')).toBe('ProductResponse');
    expect(responseSchema(doc, '/admin/products/{id}', 'patch', '200')).toBe('ProductResponse');
    expect(responseSchema(doc, '/admin/products/{id}/restock', 'post', '200')).toBe('ProductResponse');
    expect(responseSchema(doc, '/admin/products/{id}/rebalance', 'post', '200')).toBe('RebalanceResponse');
  });

  it('should name TicketResponse as the answer of joining and polling a queue, and FairnessResponse for its record', () => {
    expect(responseSchema(doc, '/products/{id}/queue', 'post', '201')).toBe('TicketResponse');
    expect(responseSchema(doc, '/products/{id}/queue', 'post', '200')).toBe('TicketResponse');
    expect(responseSchema(doc, '/products/{id}/queue/{ticket}', 'get', '200')).toBe('TicketResponse');
    expect(responseSchema(doc, '/products/{id}/queue/fairness', 'get', '200')).toBe('FairnessResponse');
  });

  it("should name ChallengeResponse as the answer of a queue's challenge, and WaitInfoResponse for the waiting page's", () => {
    expect(responseSchema(doc, '/products/{id}/queue/challenge', 'get', '200')).toBe('ChallengeResponse');
    expect(responseSchema(doc, '/products/{id}/wait/info', 'get', '200')).toBe('WaitInfoResponse');
  });

  it('should name LiveResponse as the answer of GET /health/live', () => {
    expect(responseSchema(doc, '/health/live', 'get', '200')).toBe('LiveResponse');
  });

  it('should describe an order with paidAt and closedAt optional and its allocations as segment and quantity', () => {
    const schemas = doc.components?.schemas as Record<
      string,
      { properties: Record<string, unknown>; required?: string[] }
    >;
    const order = schemas.OrderResponse;
    expect(Object.keys(order.properties).sort()).toEqual(
      [
        'allocations',
        'closedAt',
        'createdAt',
        'expiresAt',
        'id',
        'paidAt',
        'productId',
        'quantity',
        'status',
        'userId',
      ].sort(),
    );
    expect([...(order.required ?? [])].sort()).toEqual(
      ['allocations', 'createdAt', 'expiresAt', 'id', 'productId', 'quantity', 'status', 'userId'].sort(),
    );
    expect(order.properties.status).toMatchObject({ enum: ['reserved', 'paid', 'cancelled', 'expired'] });
    expect(order.properties.createdAt).toMatchObject({ type: 'string', format: 'date-time' });
    expect(order.properties.allocations).toMatchObject({
      type: 'array',
      items: { $ref: '#/components/schemas/AllocationResponse' },
    });
    expect(Object.keys(schemas.AllocationResponse.properties).sort()).toEqual(['quantity', 'segment']);
  });

  it('should describe a product with every field of its body, the sale window nullable', () => {
    const schemas = doc.components?.schemas as Record<
      string,
      { properties: Record<string, unknown>; required?: string[] }
    >;
    const product = schemas.ProductResponse;
    const fields = [
      'id',
      'name',
      'stocked',
      'stock',
      'sold',
      'reserved',
      'paid',
      'limitPerUser',
      'startsAt',
      'endsAt',
      'paymentTimeoutS',
      'waitingRoom',
      'admissionTtlS',
      'proofOfWork',
      'continueUrl',
      'segmentCount',
      'segments',
    ];
    expect(Object.keys(product.properties).sort()).toEqual([...fields].sort());
    expect([...(product.required ?? [])].sort()).toEqual([...fields].sort());
    expect(product.properties.startsAt).toMatchObject({ type: 'string', format: 'date-time', nullable: true });
    expect(product.properties.segments).toMatchObject({
      type: 'array',
      items: { $ref: '#/components/schemas/SegmentResponse' },
    });
    expect(Object.keys(schemas.RebalanceResponse.properties).sort()).toEqual(['after', 'before']);
  });
});
