// Body of POST /admin/products.
import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { IsInt, IsOptional, IsString, Length, Matches, Max, Min } from 'class-validator';
import { PaymentTimeout, SaleInstant } from './sale-terms';

export const MAX_SEGMENTS = 1024;
export const MAX_STOCK = 1_000_000_000;
export const MAX_LIMIT_PER_USER = 1000;

export class CreateProductDto {
  @ApiProperty({ minLength: 1, maxLength: 200, example: 'Limited sneaker' })
  @IsString()
  @Length(1, 200)
  @Matches(/^\P{Cc}*$/u, { message: 'name must not contain control characters' })
  name: string;

  @ApiProperty({ minimum: 0, maximum: MAX_STOCK, example: 1000 })
  @IsInt()
  @Min(0)
  @Max(MAX_STOCK)
  stock: number;

  @ApiProperty({ minimum: 1, maximum: MAX_SEGMENTS, example: 20 })
  @IsInt()
  @Min(1)
  @Max(MAX_SEGMENTS)
  segments: number;

  @ApiPropertyOptional({ minimum: 1, maximum: MAX_LIMIT_PER_USER, default: 1 })
  @IsOptional()
  @IsInt()
  @Min(1)
  @Max(MAX_LIMIT_PER_USER)
  limitPerUser?: number;

  @SaleInstant('startsAt: when the sale opens')
  startsAt?: Date | null;

  @SaleInstant('endsAt: when the sale closes, after startsAt')
  endsAt?: Date | null;

  @PaymentTimeout()
  paymentTimeoutS?: number;
}
