// The `userId` field of a body, as every route that names a buyer validates it (orders, the queue).
import { applyDecorators } from '@nestjs/common';
import { ApiProperty } from '@nestjs/swagger';
import { Transform } from 'class-transformer';
import { IsString, Matches } from 'class-validator';
import { USER_ID_PATTERN } from './ids';

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
