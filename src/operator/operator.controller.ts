// The operator page (GET /admin: static, no secret in it; it asks for the admin token and sends it
// with every call) and the one call it polls, GET /admin/live (admin token): the deployment's
// figures of the last minute from every process, the newest products with their segments, and the
// event stream's head for the page to follow the events from.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Controller, Get, Param, Res, UseGuards } from '@nestjs/common';
import { ApiBearerAuth, ApiExcludeEndpoint, ApiOperation, ApiTags } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';
import { AdminTokenGuard } from '../admin/admin-token.guard';
import { NotFoundError } from '../common/domain-errors';
import { formatCursor } from '../events/event-cursor';
import { EventsRepository } from '../events/events.repository';
import { summarise, LiveSummary } from './live-stats';
import { LiveStatsService } from './live-stats.service';
import { OperatorRepository, ProductGlance } from './operator.repository';

const WINDOW_S = 5;
const HISTORY_S = 60;

/** The page's files, read once: ours beside this file, uPlot from its package. */
const ASSETS: Record<string, { type: string; path: () => string }> = {
  'app.js': { type: 'text/javascript; charset=utf-8', path: () => join(__dirname, 'page', 'app.js') },
  'app.css': { type: 'text/css; charset=utf-8', path: () => join(__dirname, 'page', 'app.css') },
  'uPlot.iife.min.js': {
    type: 'text/javascript; charset=utf-8',
    path: () => require.resolve('uplot/dist/uPlot.iife.min.js'),
  },
  'uPlot.min.css': { type: 'text/css; charset=utf-8', path: () => require.resolve('uplot/dist/uPlot.min.css') },
};
const cache = new Map<string, Buffer>();
const read = (path: string) => cache.get(path) ?? cache.set(path, readFileSync(path)).get(path)!;

export interface LiveResponse {
  at: string;
  head: string;
  live: LiveSummary;
  products: ProductGlance[];
}

@ApiTags('operator')
@Controller('admin')
export class OperatorController {
  constructor(
    private readonly stats: LiveStatsService,
    private readonly repo: OperatorRepository,
    private readonly events: EventsRepository,
  ) {}

  @Get()
  @ApiExcludeEndpoint()
  page(@Res() reply: FastifyReply): void {
    void reply
      .header('content-type', 'text/html; charset=utf-8')
      .header('cache-control', 'no-store')
      .header('content-security-policy', "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:")
      .send(read(join(__dirname, 'page', 'index.html')));
  }

  @Get('assets/:name')
  @ApiExcludeEndpoint()
  asset(@Param('name') name: string, @Res() reply: FastifyReply): void {
    const asset = Object.hasOwn(ASSETS, name) ? ASSETS[name] : undefined;
    if (!asset) throw new NotFoundError(`no asset ${name}`);
    void reply.header('content-type', asset.type).header('cache-control', 'max-age=300').send(read(asset.path()));
  }

  @Get('live')
  @UseGuards(AdminTokenGuard)
  @ApiBearerAuth('admin')
  @ApiOperation({
    summary:
      "The operator page's figures: orders, refusals, 429s, errors, lock waits, fall-overs and latency of every process over the last minute; the newest products with their segments and queues; the event stream's head",
  })
  async live(): Promise<LiveResponse> {
    const now = Math.floor(Date.now() / 1000);
    const [records, products, head] = await Promise.all([
      this.stats.records(now - HISTORY_S, now).catch(() => []),
      this.repo.products(20),
      this.events.head(),
    ]);
    return {
      at: new Date().toISOString(),
      head: formatCursor(head),
      // The current second is still being written: figures end with the last whole one.
      live: summarise(records, now - HISTORY_S, now - 1, WINDOW_S),
      products,
    };
  }
}
