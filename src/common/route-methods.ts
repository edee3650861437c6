// Which methods a path has: a request whose path is known but whose method is not is answered 405
// with `Allow` (not 404). The routes are recorded as Fastify adds them, into a router of the same
// kind as Fastify's own (find-my-way), so a path matches here exactly as it matches there.
import Router, { HTTPMethod } from 'find-my-way';
import type { FastifyInstance } from 'fastify';

export class RouteMethods {
  private readonly router = Router();
  private readonly methods = new Set<HTTPMethod>();

  /** Records every route Fastify adds from now on. */
  constructor(fastify: FastifyInstance) {
    fastify.addHook('onRoute', (route) => {
      for (const method of [route.method].flat() as HTTPMethod[]) {
        if (this.router.hasRoute(method, route.url)) continue;
        this.router.on(method, route.url, () => undefined);
        this.methods.add(method);
      }
    });
  }

  /** The methods that `url` (its path; a query is ignored) has, sorted; empty when the path names no route. */
  allowed(url: string): string[] {
    const path = url.split('?')[0];
    return [...this.methods].filter((m) => this.router.find(m, path) !== null).sort();
  }
}
