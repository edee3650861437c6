// Which methods a path has, as recorded from the routes Fastify adds (no network: fastify's inject).
import Fastify from 'fastify';
import { RouteMethods } from './route-methods';

describe('RouteMethods', () => {
  it('should list the methods of a path, parameters and queries included, and none for an unknown path', async () => {
    const fastify = Fastify();
    const routes = new RouteMethods(fastify);
    const ok = () => 'ok';
    fastify.post('/orders', ok);
    fastify.get('/orders/:id', ok);
    fastify.post('/orders/:id/pay', ok);
    fastify.patch('/admin/products/:id', ok);
    fastify.get('/admin/products/:id', ok);
    await fastify.ready();
    expect(routes.allowed('/orders')).toEqual(['POST']);
    expect(routes.allowed('/orders/12?x=1')).toEqual(['GET', 'HEAD']);
    expect(routes.allowed('/orders/12/pay')).toEqual(['POST']);
    expect(routes.allowed('/admin/products/3')).toEqual(['GET', 'HEAD', 'PATCH']);
    expect(routes.allowed('/nowhere')).toEqual([]);
    expect(routes.allowed('/orders/12/refund')).toEqual([]);
    await fastify.close();
  });
});
