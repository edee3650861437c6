// toOrderResponse: the body of an order is the order row's fields, nothing more, with paidAt and
// closedAt absent (not null) until they happen.
import type { OrderRow } from '../order.types';
import { toOrderResponse } from './order-response.dto';

const reserved: OrderRow = {
  id: 41,
  productId: 7,
  userId: 'u1',
  quantity: 2,
  allocations: [
    { segment: 1, quantity: 1 },
    { segment: 3, quantity: 1 },
  ],
  status: 'reserved',
  createdAt: new Date('2026-11-23T10:00:00.000Z'),
  expiresAt: new Date('2026-11-23T10:15:00.000Z'),
};

describe('toOrderResponse', () => {
  it('should answer a reserved order as the same JSON text as its row, without paidAt or closedAt', () => {
    expect(JSON.stringify(toOrderResponse(reserved))).toBe(JSON.stringify(reserved));
    const body = JSON.parse(JSON.stringify(toOrderResponse(reserved)));
    expect(body).toEqual({
      id: 41,
      productId: 7,
      userId: 'u1',
      quantity: 2,
      allocations: [
        { segment: 1, quantity: 1 },
        { segment: 3, quantity: 1 },
      ],
      status: 'reserved',
      createdAt: '2026-11-23T10:00:00.000Z',
      expiresAt: '2026-11-23T10:15:00.000Z',
    });
    expect('paidAt' in body || 'closedAt' in body).toBe(false);
  });

  it('should carry paidAt once paid and closedAt once closed', () => {
    const paid: OrderRow = { ...reserved, status: 'paid', paidAt: new Date('2026-11-23T10:05:00.000Z') };
    const cancelled: OrderRow = { ...reserved, status: 'cancelled', closedAt: new Date('2026-11-23T10:06:00.000Z') };
    expect(JSON.stringify(toOrderResponse(paid))).toBe(JSON.stringify(paid));
    expect(JSON.stringify(toOrderResponse(cancelled))).toBe(JSON.stringify(cancelled));
    expect(toOrderResponse(paid)).toMatchObject({ paidAt: paid.paidAt });
    expect('closedAt' in toOrderResponse(paid)).toBe(false);
    expect(toOrderResponse(cancelled)).toMatchObject({ closedAt: cancelled.closedAt });
    expect('paidAt' in toOrderResponse(cancelled)).toBe(false);
  });
});
