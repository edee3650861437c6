// Admin calls need `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant time.
import { CanActivate, ExecutionContext, Inject, Injectable } from '@nestjs/common';
import type { IncomingHttpHeaders } from 'node:http';
import { AdminConfig, ResolvedAdminConfig } from '../config/app-config';
import { bearerToken, SharedSecret } from '../common/bearer';
import { UnauthenticatedError } from '../common/domain-errors';

@Injectable()
export class AdminTokenGuard implements CanActivate {
  private readonly secret: SharedSecret;

  constructor(@Inject(AdminConfig) config: ResolvedAdminConfig) {
    this.secret = new SharedSecret(config.token);
  }

  canActivate(context: ExecutionContext): boolean {
    const header = context.switchToHttp().getRequest<{ headers: IncomingHttpHeaders }>().headers.authorization;
    if (!this.secret.matches(bearerToken(header)))
      throw new UnauthenticatedError('a valid admin bearer token is required');
    return true;
  }
}
