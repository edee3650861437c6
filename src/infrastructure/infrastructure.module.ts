// Shared services of every module: the resolved config, Redis clients, locks and metrics.
import { DynamicModule, Global, Inject, Module, OnApplicationShutdown } from '@nestjs/common';
import type Redis from 'ioredis';
import { APP_CONFIG, ResolvedConfig } from '../config/app-config';
import { LockService } from '../locks/lock.service';
import { MetricsService } from '../metrics/metrics.service';
import { REDIS_CLIENT, REDIS_LOCK_CLIENTS, redisProviders } from './redis.providers';

@Global()
@Module({})
export class InfrastructureModule implements OnApplicationShutdown {
  constructor(
    @Inject(REDIS_CLIENT) private readonly main: Redis,
    @Inject(REDIS_LOCK_CLIENTS) private readonly lockClients: Redis[],
  ) {}

  static forRoot(config: ResolvedConfig): DynamicModule {
    return {
      module: InfrastructureModule,
      providers: [{ provide: APP_CONFIG, useValue: config }, ...redisProviders, MetricsService, LockService],
      exports: [APP_CONFIG, REDIS_CLIENT, REDIS_LOCK_CLIENTS, MetricsService, LockService],
    };
  }

  /** Runs after the HTTP server stopped taking requests and in-flight ones finished. */
  async onApplicationShutdown(): Promise<void> {
    const clients = new Set([this.main, ...this.lockClients]);
    await Promise.all([...clients].map((c) => c.quit().catch(() => c.disconnect())));
  }
}
