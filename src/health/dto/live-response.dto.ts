// The body of GET /health/live, as OpenAPI shows it. (GET /health's schema comes with terminus's
// @HealthCheck.)
import { ApiProperty } from '@nestjs/swagger';

export class LiveResponse {
  @ApiProperty({ enum: ['ok'], example: 'ok' })
  status: 'ok';
}
