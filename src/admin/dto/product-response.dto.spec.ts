// toProductResponse: the body of a product is its view's fields, an open sale window as null.
import type { ProductView } from '../../inventory/product.types';
import { toProductResponse } from './product-response.dto';

const view: ProductView = {
  id: 3,
  name: 'Sneaker',
  stocked: 10,
  stock: 7,
  sold: 3,
  reserved: 2,
  paid: 1,
  limitPerUser: 1,
  startsAt: null,
  endsAt: new Date('2026-11-24T00:00:00.000Z'),
  paymentTimeoutS: 900,
  waitingRoom: false,
  admissionTtlS: 120,
  proofOfWork: false,
  continueUrl: null,
  segmentCount: 2,
  segments: [
    { index: 0, stock: 4 },
    { index: 1, stock: 3 },
  ],
};

describe('toProductResponse', () => {
  it('should answer a product as the same JSON text as its view, an open window bound as null', () => {
    expect(JSON.stringify(toProductResponse(view))).toBe(JSON.stringify(view));
    const body = JSON.parse(JSON.stringify(toProductResponse(view)));
    expect(body.startsAt).toBeNull();
    expect(body.endsAt).toBe('2026-11-24T00:00:00.000Z');
  });
});
