// Shared services of every module: the Redis clients and the metrics.
import { Global, Inject, Module, OnApplicationShutdown } from '@nestjs/common';
import type Redis from 'ioredis';
import { MetricsService } from '../metrics/metrics.service';
import { REDIS_CLIENT, REDIS_LOCK_CLIENTS, redisProviders } from './redis.providers';

@Global()
@Module({
  providers: [...redisProviders, MetricsService],
  exports: [REDIS_CLIENT, REDIS_LOCK_CLIENTS, MetricsService],
})
export class InfrastructureModule implements OnApplicationShutdown {
  constructor(
    @Inject(REDIS_CLIENT) private readonly main: Redis,
    @Inject(REDIS_LOCK_CLIENTS) private readonly lockClients: Redis[],
  ) {}

  /** Runs after the HTTP server stopped taking requests and in-flight ones finished. */
  async onApplicationShutdown(): Promise<void> {
    const clients = new Set([this.main, ...this.lockClients]);
    await Promise.all([...clients].map((c) => c.quit().catch(() => c.disconnect())));
  }
}
