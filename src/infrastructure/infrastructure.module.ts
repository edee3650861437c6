// Shared services of every module: the Redis clients, where a key lives on them, and the metrics.
import { Global, Inject, Module, OnApplicationShutdown } from '@nestjs/common';
import { MetricsService } from '../metrics/metrics.service';
import { RedisReachability } from './redis-reachability';
import { REDIS_CLIENT, REDIS_LOCK_CLIENTS, RedisClient, redisProviders } from './redis.providers';

@Global()
@Module({
  providers: [...redisProviders, RedisReachability, MetricsService],
  exports: [REDIS_CLIENT, REDIS_LOCK_CLIENTS, RedisReachability, MetricsService],
})
export class InfrastructureModule implements OnApplicationShutdown {
  constructor(
    @Inject(REDIS_CLIENT) private readonly main: RedisClient,
    @Inject(REDIS_LOCK_CLIENTS) private readonly lockClients: RedisClient[],
  ) {}

  /** Runs after the HTTP server stopped taking requests and in-flight ones finished. */
  async onApplicationShutdown(): Promise<void> {
    const clients = new Set([this.main, ...this.lockClients]);
    await Promise.all([...clients].map((c) => c.quit().catch(() => c.disconnect())));
  }
}
