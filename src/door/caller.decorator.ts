// The caller the door let through (door.service.ts), as a controller parameter.
import { createParamDecorator, ExecutionContext } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import type { Caller } from './door.service';

export const CallerOf = createParamDecorator(
  (_: unknown, ctx: ExecutionContext): Caller | undefined => ctx.switchToHttp().getRequest<FastifyRequest>().caller,
);
