// Body of POST /orders.
import { applyDecorators } from '@nestjs/common';
import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { Transform } from 'class-transformer';
import { IsInt, IsString, Matches, Max, MaxLength, Min, ValidateIf } from 'class-validator';

import { MAX_ID, USER_ID_PATTERN } from '../../common/ids';

/** A positive integer user id is kept as its decimal string; anything else is validated as given. */
const userIdFromNumber = ({ value }: { value: unknown }) =>
  typeof value === 'number' && Number.isSafeInteger(value) && value > 0 ? String(value) : value;

/** `userId`: 1-64 characters of [A-Za-z0-9_.:-], or a positive integer kept as its decimal string. */
export function UserId(description = '1-64 characters of [A-Za-z0-9_.:-], or a positive integer'): PropertyDecorator {
  return applyDecorators(
    ApiProperty({ description, example: 'user-42' }),
    Transform(userIdFromNumber),
    IsString({ message: 'userId must be a string or a positive integer' }),
    Matches(USER_ID_PATTERN, { message: 'userId must be 1 to 64 characters from [A-Za-z0-9_.:-]' }),
  );
}

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
