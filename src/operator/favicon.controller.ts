// GET /favicon.ico: the service's icon (a lightning bolt on the operator page's dark blue, 16 and
// 32 px), for the operator page, the API docs and any URL a browser opens, which asks for it.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Controller, Get, Res } from '@nestjs/common';
import { ApiExcludeEndpoint } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';

@Controller()
export class FaviconController {
  private readonly icon = readFileSync(join(__dirname, 'page', 'favicon.ico'));

  @Get('favicon.ico')
  @ApiExcludeEndpoint()
  favicon(@Res() reply: FastifyReply): void {
    void reply.header('content-type', 'image/x-icon').header('cache-control', 'max-age=86400').send(this.icon);
  }
}
