// GET /events: the order and product events, in order, from any cursor; JSON pages (with an
// optional long-poll) or, with `Accept: text/event-stream`, a Server-Sent Events stream that a
// client resumes with Last-Event-ID.
import { Controller, Get, Headers, Query, Res, UseGuards } from '@nestjs/common';
import { ApiBearerAuth, ApiHeader, ApiOkResponse, ApiOperation, ApiResponse, ApiTags } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';
import { ValidationFailedError } from '../common/domain-errors';
import { EventPageResponse } from './dto/event-response.dto';
import { EventsQueryDto } from './dto/events-query.dto';
import { EventCursor, parseCursor, START } from './event-cursor';
import { StreamEvent } from './events.repository';
import { EventsService } from './events.service';
import { ShopOrAdminGuard } from './shop-or-admin.guard';

const sse = (e: StreamEvent) => `id: ${e.cursor}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;

@ApiTags('events')
@Controller('events')
@UseGuards(ShopOrAdminGuard)
export class EventsController {
  constructor(private readonly events: EventsService) {}

  @Get()
  @ApiBearerAuth('shop')
  @ApiBearerAuth('admin')
  @ApiOperation({
    summary:
      'Order and product events after a cursor, in order (at least once: deduplicate by cursor). JSON pages, waiting up to `wait` s for the first; or, with Accept: text/event-stream, a Server-Sent Events stream (resume with Last-Event-ID)',
  })
  @ApiHeader({
    name: 'Last-Event-ID',
    required: false,
    description: 'SSE: the last cursor received (wins over ?after)',
  })
  @ApiOkResponse({ type: EventPageResponse })
  @ApiResponse({
    status: 400,
    description:
      'VALIDATION_FAILED: a malformed cursor, limit or wait; CURSOR_AHEAD: the cursor (after or Last-Event-ID) is past the newest event, which `newest` names',
  })
  @ApiResponse({ status: 401, description: 'UNAUTHENTICATED: neither the shop token nor the admin token' })
  @ApiResponse({ status: 404, description: 'PRODUCT_NOT_FOUND: productId names no product' })
  @ApiResponse({
    status: 410,
    description: 'EVENTS_PRUNED: events after this cursor were deleted (EVENTS_RETENTION_S)',
  })
  @ApiResponse({ status: 503, description: 'UNAVAILABLE, with Retry-After' })
  async list(
    @Query() q: EventsQueryDto,
    @Headers('accept') accept: string | undefined,
    @Headers('last-event-id') lastEventId: string | undefined,
    @Res({ passthrough: true }) reply: FastifyReply,
  ): Promise<EventPageResponse | undefined> {
    const after = q.after === undefined ? START : (parseCursor(q.after) ?? this.badCursor('after'));
    if (!accept?.includes('text/event-stream'))
      return this.events.page(after, q.limit ?? 100, (q.wait ?? 0) * 1000, q.productId);
    const from = lastEventId === undefined ? after : (parseCursor(lastEventId) ?? this.badCursor('Last-Event-ID'));
    await this.stream(from, q.productId, reply);
    return undefined;
  }

  /** The SSE stream: the first page is read before any byte is sent, so its refusals are plain JSON errors. */
  private async stream(from: EventCursor, productId: number | undefined, reply: FastifyReply): Promise<void> {
    const first = await this.events.page(from, 500, 0, productId);
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      'x-accel-buffering': 'no',
      connection: 'keep-alive',
    });
    res.write(`retry: 1000\n\n`);
    for (const e of first.events) res.write(sse(e));
    let gone = false;
    res.on('close', () => (gone = true));
    try {
      await this.events.follow(
        parseCursor(first.next) as EventCursor,
        productId,
        (e) => res.write(sse(e)),
        () => res.write(': still here\n\n'),
        () => gone,
      );
    } catch (err) {
      // Headers are gone: the stream ends, and the client reconnects with Last-Event-ID.
      if (!gone) res.write(`event: error\ndata: ${JSON.stringify({ message: (err as Error).message })}\n\n`);
    }
    res.end();
  }

  private badCursor(what: string): never {
    throw new ValidationFailedError(`${what} must be a cursor as the stream gives them: <tx>-<id>`);
  }
}
