// Body of POST /orders.
import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { IsInt, IsString, Max, MaxLength, Min, ValidateIf } from 'class-validator';

import { MAX_ID } from '../../common/ids';
import { UserId } from '../../common/user-id.decorator';

export class CreateOrderDto {
  @UserId()
  userId: string;

  @ApiProperty({ minimum: 1, maximum: MAX_ID, example: 1 })
  @IsInt({ message: 'productId must be an integer' })
  @Min(1)
  @Max(MAX_ID)
  productId: number;

  @ApiPropertyOptional({ minimum: 1, default: 1, description: "at most the product's limitPerUser" })
  // Absent means 1; an explicit null is a wrong type, not a default.
  @ValidateIf((o: CreateOrderDto) => o.quantity !== undefined)
  @IsInt({ message: 'quantity must be an integer' })
  @Min(1)
  @Max(MAX_ID)
  quantity?: number;

  @ApiPropertyOptional({
    description:
      'the admission from the waiting room (GET /products/:id/queue/:ticketId while admitted); required by products with a waiting room',
  })
  @ValidateIf((o: CreateOrderDto) => o.admission !== undefined)
  @IsString({ message: 'admission must be a string' })
  @MaxLength(2048)
  admission?: string;
}
