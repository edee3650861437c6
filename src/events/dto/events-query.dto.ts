// Query of GET /events.
import { ApiPropertyOptional } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { IsInt, IsOptional, Matches, Max, Min } from 'class-validator';
import { CURSOR_PATTERN } from '../event-cursor';

export class EventsQueryDto {
  @ApiPropertyOptional({
    description:
      'Read the events after this cursor (the `cursor` of the last event applied, or `next` of the last page); absent: from the oldest event kept',
    example: '48213-1907',
  })
  @IsOptional()
  @Matches(CURSOR_PATTERN, { message: 'after must be a cursor as the stream gives them: <tx>-<id>' })
  after?: string;

  @ApiPropertyOptional({ description: 'Events per page at most', minimum: 1, maximum: 1000, default: 100 })
  @IsOptional()
  @Type(() => Number)
  @IsInt()
  @Min(1)
  @Max(1000)
  limit?: number;

  @ApiPropertyOptional({
    description: 'Seconds to wait for the first event when there is none yet (long-poll)',
    minimum: 0,
    maximum: 60,
    default: 0,
  })
  @IsOptional()
  @Type(() => Number)
  @IsInt()
  @Min(0)
  @Max(60)
  wait?: number;

  @ApiPropertyOptional({ description: "Only this product's events" })
  @IsOptional()
  @Type(() => Number)
  @IsInt()
  @Min(1)
  @Max(2_147_483_647)
  productId?: number;
}
