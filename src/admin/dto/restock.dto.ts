// Body of POST /admin/products/:id/restock.
import { ApiProperty } from '@nestjs/swagger';
import { IsInt, Max, Min } from 'class-validator';
import { MAX_STOCK } from './create-product.dto';

export class RestockDto {
  @ApiProperty({
    minimum: 1,
    maximum: MAX_STOCK,
    example: 100,
    description: 'units to add, spread so that the segments end as even as possible',
  })
  @IsInt()
  @Min(1)
  @Max(MAX_STOCK)
  units: number;
}
