// Body of PATCH /admin/products/:id: any of the sale's terms; fields left out keep their value.
import { ApiPropertyOptional } from '@nestjs/swagger';
import { IsInt, IsOptional, IsString, Length, Matches, Max, Min } from 'class-validator';
import { MAX_LIMIT_PER_USER } from './create-product.dto';
import { PaymentTimeout, SaleInstant } from './sale-terms';

export class UpdateProductDto {
  @ApiPropertyOptional({ minLength: 1, maxLength: 200 })
  @IsOptional()
  @IsString()
  @Length(1, 200)
  @Matches(/^\P{Cc}*$/u, { message: 'name must not contain control characters' })
  name?: string;

  @ApiPropertyOptional({ minimum: 1, maximum: MAX_LIMIT_PER_USER })
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
