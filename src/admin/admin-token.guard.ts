// Admin calls need `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant time.
import { CanActivate, ExecutionContext, Inject, Injectable } from '@nestjs/common';
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { AdminConfig, ResolvedAdminConfig } from '../config/app-config';
import { UnauthorizedError } from '../common/domain-errors';

const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();

@Injectable()
export class AdminTokenGuard implements CanActivate {
  private readonly expected: Buffer;

  constructor(@Inject(AdminConfig) config: ResolvedAdminConfig) {
    this.expected = digest(config.token);
  }

  canActivate(context: ExecutionContext): boolean {
    const header = context.switchToHttp().getRequest<{ headers: IncomingHttpHeaders }>().headers.authorization ?? '';
    const match = /^Bearer (.+)$/i.exec(header);
    // Digests have one length whatever was sent, so the comparison time says nothing about the token.
    if (!match || !timingSafeEqual(digest(match[1]), this.expected)) throw new UnauthorizedError();
    return true;
  }
}
