// The event stream is the shop's (SHOP_TOKEN) and the operator's (ADMIN_TOKEN); buyers do not see it.
import { CanActivate, ExecutionContext, Inject, Injectable } from '@nestjs/common';
import type { IncomingHttpHeaders } from 'node:http';
import { bearerToken, SharedSecret } from '../common/bearer';
import { UnauthenticatedError } from '../common/domain-errors';
import { AdminConfig, IdentityConfig, ResolvedAdminConfig, ResolvedIdentityConfig } from '../config/app-config';

@Injectable()
export class ShopOrAdminGuard implements CanActivate {
  private readonly secrets: SharedSecret[];

  constructor(
    @Inject(IdentityConfig) identity: ResolvedIdentityConfig,
    @Inject(AdminConfig) admin: ResolvedAdminConfig,
  ) {
    this.secrets = [new SharedSecret(identity.shopToken), new SharedSecret(admin.token)];
  }

  canActivate(context: ExecutionContext): boolean {
    const header = context.switchToHttp().getRequest<{ headers: IncomingHttpHeaders }>().headers.authorization;
    const token = bearerToken(header);
    // Both compared, whatever the first says: the time tells nothing about which token was sent.
    const matches = this.secrets.map((s) => s.matches(token));
    if (!matches.includes(true)) throw new UnauthenticatedError('the shop token or the admin token is required');
    return true;
  }
}
