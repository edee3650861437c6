// Body of POST /orders/:id/pay and POST /orders/:id/cancel: who claims the order.
import { ApiProperty } from '@nestjs/swagger';
import { Transform } from 'class-transformer';
import { IsString, Matches } from 'class-validator';
import { USER_ID_PATTERN, userIdFromNumber } from './create-order.dto';

export class OrderOwnerDto {
  @ApiProperty({ description: "the order's userId: 1-64 characters of [A-Za-z0-9_.:-], or a positive integer", example: 'user-42' })
  @Transform(userIdFromNumber)
  @IsString({ message: 'userId must be a string or a positive integer' })
  @Matches(USER_ID_PATTERN, { message: 'userId must be 1 to 64 characters from [A-Za-z0-9_.:-]' })
  userId: string;
}
