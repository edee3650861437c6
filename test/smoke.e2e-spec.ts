import { createProduct, request, startService, ServiceProcess } from './support/service';
import { auditProduct, resetState } from './support/database';

describe('smoke', () => {
  let svc: ServiceProcess;
  beforeAll(async () => {
    await resetState();
    svc = await startService();
  });
  afterAll(async () => svc && (await svc.stop()));

  it('should sell one unit to one user', async () => {
    const p = await createProduct(svc.url, { stock: 5, segments: 2 });
    const res = await request(svc.url, 'POST', '/orders', { userId: 'u1', productId: p.id });
    expect(res.status).toBe(201);
    expect(await auditProduct(p.id)).toMatchObject({ totalStock: 5, remaining: 4, ordered: 1 });
  });
});
