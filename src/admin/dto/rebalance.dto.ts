// Body of POST /admin/products/:id/rebalance.
import { ApiPropertyOptional } from '@nestjs/swagger';
import { IsInt, IsOptional, Max, Min } from 'class-validator';
import { MAX_SEGMENTS } from './create-product.dto';

export class RebalanceDto {
  @ApiPropertyOptional({
    minimum: 1,
    maximum: MAX_SEGMENTS,
    description: 'new segment count; default: keep the current one',
  })
  @IsOptional()
  @IsInt()
  @Min(1)
  @Max(MAX_SEGMENTS)
  segments?: number;
}
