// The buyer's waiting page (GET /products/:id/wait: static, the same for every product, answered
// 404 for a product that does not exist; its script reads the product from the path), what it needs
// to know of the product (GET /products/:id/wait/info, from the product cache: no PostgreSQL query
// per page load while the cache is fresh), and its files: ours beside this file, and altcha-lib's
// browser solver (its v1 ES modules, run in Web Workers), both served from here so the page makes
// no third-party request.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Controller, Get, Param, Res } from '@nestjs/common';
import { ApiExcludeEndpoint, ApiOkResponse, ApiOperation, ApiProperty, ApiResponse, ApiTags } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';
import { NotFoundError, ProductNotFoundError } from '../common/domain-errors';
import { ProductIdPipe, productIdFromPath } from '../common/ids';
import { ProductCatalogService } from '../inventory/product-catalog.service';
import { ProofOfWorkService } from '../proof-of-work/proof-of-work.service';

const JS = 'text/javascript; charset=utf-8';
/** altcha-lib's ES modules of the v1 scheme: the worker imports index.js, which imports helpers.js. */
const solverDir = () => join(dirname(require.resolve('altcha-lib/v1')), '..', '..', 'esm', 'v1');
const ASSETS: Record<string, { type: string; path: () => string }> = {
  'wait.js': { type: JS, path: () => join(__dirname, 'page', 'wait.js') },
  'solver.js': { type: JS, path: () => join(__dirname, 'page', 'solver.js') },
  'pacing.js': { type: JS, path: () => join(__dirname, 'page', 'pacing.js') },
  'wait.css': { type: 'text/css; charset=utf-8', path: () => join(__dirname, 'page', 'wait.css') },
  'worker.js': { type: JS, path: () => join(solverDir(), 'worker.js') },
  'index.js': { type: JS, path: () => join(solverDir(), 'index.js') },
  'helpers.js': { type: JS, path: () => join(solverDir(), 'helpers.js') },
};
const cache = new Map<string, Buffer>();
const read = (path: string) => cache.get(path) ?? cache.set(path, readFileSync(path)).get(path)!;

/** The page's policy: nothing from elsewhere, no inline script; workers from here only. */
export const WAIT_PAGE_CSP =
  "default-src 'self'; script-src 'self'; worker-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

export class WaitInfoResponse {
  @ApiProperty()
  productId: number;
  @ApiProperty({ description: "the product's name, as the page shows it" })
  name: string;
  @ApiProperty({ description: 'whether the product sells through its queue' })
  waitingRoom: boolean;
  @ApiProperty({ description: 'joining needs a solved proof-of-work challenge' })
  proofOfWork: boolean;
  @ApiProperty({ description: 'buyer identity is on: the page needs the buyer token the shop hands over' })
  identity: boolean;
  @ApiProperty({ type: String, format: 'date-time', nullable: true })
  startsAt: string | null;
  @ApiProperty({ type: String, format: 'date-time', nullable: true })
  endsAt: string | null;
  @ApiProperty({ type: String, nullable: true, description: "the shop's page an admitted buyer continues to" })
  continueUrl: string | null;
  @ApiProperty({ format: 'date-time', description: "the service's clock, for the countdown" })
  now: string;
}

@ApiTags('waiting room')
@Controller()
export class WaitPageController {
  constructor(
    private readonly catalog: ProductCatalogService,
    private readonly pow: ProofOfWorkService,
  ) {}

  @Get('products/:id/wait')
  @ApiExcludeEndpoint()
  async page(@Param('id') id: string, @Res() reply: FastifyReply): Promise<void> {
    // A wrong address gets the page too, under its error status: its script then says in words
    // what is wrong (no such product, no product id), which a JSON error body would not.
    void reply
      .code(await this.pageStatus(id))
      .header('content-type', 'text/html; charset=utf-8')
      .header('cache-control', 'no-store')
      .header('content-security-policy', WAIT_PAGE_CSP)
      .header('referrer-policy', 'no-referrer')
      .send(read(join(__dirname, 'page', 'wait.html')));
  }

  /** 200 for a product, 404 for none, 400 for a path that names none; PostgreSQL down: its 503. */
  private async pageStatus(id: string): Promise<number> {
    const productId = productIdFromPath(id);
    if (Number.isNaN(productId)) return 400;
    try {
      await this.catalog.get(productId);
      return 200;
    } catch (err) {
      if (err instanceof ProductNotFoundError) return 404;
      throw err;
    }
  }

  @Get('products/:id/wait/info')
  @ApiOperation({ summary: "What the buyer's waiting page needs to know of a product (public)" })
  @ApiOkResponse({ type: WaitInfoResponse })
  @ApiResponse({ status: 400, description: 'VALIDATION_FAILED: the id is not a product id' })
  @ApiResponse({ status: 404, description: 'PRODUCT_NOT_FOUND' })
  async info(
    @Param('id', ProductIdPipe) id: string,
    @Res({ passthrough: true }) reply: FastifyReply,
  ): Promise<WaitInfoResponse> {
    const productId = Number(id);
    const p = await this.catalog.get(productId);
    void reply.header('cache-control', 'no-store');
    return {
      productId,
      name: p.name,
      waitingRoom: p.waitingRoom,
      proofOfWork: p.proofOfWork === true,
      identity: this.pow.bound,
      startsAt: p.startsAt === null ? null : new Date(p.startsAt).toISOString(),
      endsAt: p.endsAt === null ? null : new Date(p.endsAt).toISOString(),
      continueUrl: p.continueUrl ?? null,
      now: new Date().toISOString(),
    };
  }

  @Get('wait/assets/:name')
  @ApiExcludeEndpoint()
  asset(@Param('name') name: string, @Res() reply: FastifyReply): void {
    const asset = Object.hasOwn(ASSETS, name) ? ASSETS[name] : undefined;
    if (!asset) throw new NotFoundError(`no asset ${name}`);
    void reply
      .header('content-type', asset.type)
      .header('cache-control', 'max-age=300')
      .header('content-security-policy', WAIT_PAGE_CSP)
      .send(read(asset.path()));
  }
}
