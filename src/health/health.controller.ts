// GET /health (readiness: PostgreSQL and a quorum of Redis lock masters, or one Redis Cluster master,
// answer; each one reported),
// GET /health/live (the process runs) and GET /metrics (Prometheus).
import { Controller, Get, Header, Res } from '@nestjs/common';
import { ApiExcludeEndpoint, ApiOkResponse, ApiOperation, ApiTags } from '@nestjs/swagger';
import { HealthCheck, HealthCheckService, TypeOrmHealthIndicator } from '@nestjs/terminus';
import type { FastifyReply } from 'fastify';
import { MetricsService } from '../metrics/metrics.service';
import { LiveResponse } from './dto/live-response.dto';
import { RedisHealthIndicator } from './redis.health';

@ApiTags('health')
@Controller()
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly db: TypeOrmHealthIndicator,
    private readonly redis: RedisHealthIndicator,
    private readonly metrics: MetricsService,
  ) {}

  @Get('health')
  @HealthCheck()
  @ApiOperation({
    summary:
      'Readiness per dependency: 200 when PostgreSQL and a quorum of Redis lock masters (on a Redis Cluster: any master) answer, 503 otherwise',
  })
  async ready(@Res({ passthrough: true }) res: FastifyReply) {
    try {
      return await this.health.check([
        () => this.db.pingCheck('postgres', { timeout: 1000 }),
        () => this.redis.check('redis'),
      ]);
    } catch (err) {
      res.code(503).header('Retry-After', '1');
      return (err as { response?: unknown }).response ?? { status: 'error' };
    }
  }

  @Get('health/live')
  @ApiOperation({ summary: 'Liveness: 200 while the process serves requests' })
  @ApiOkResponse({ type: LiveResponse })
  live(): LiveResponse {
    return { status: 'ok' };
  }

  @Get('metrics')
  @ApiExcludeEndpoint()
  @Header('Content-Type', 'text/plain; version=0.0.4; charset=utf-8')
  async prometheus(): Promise<string> {
    // Pings every Redis master, so that flashsale_redis_master_up is current.
    await this.redis.check('redis');
    return this.metrics.render();
  }
}
