// Validation of the sale's terms shared by POST /admin/products and PATCH /admin/products/:id.
import { applyDecorators } from '@nestjs/common';
import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { Transform } from 'class-transformer';
import {
  IsBoolean,
  IsDate,
  IsInt,
  IsOptional,
  isISO8601,
  IsString,
  IsUrl,
  Length,
  MaxLength,
  Matches,
  Max,
  Min,
  ValidateIf,
} from 'class-validator';

export const MAX_PAYMENT_TIMEOUT_S = 86_400;
export const MAX_LIMIT_PER_USER = 1000;
export const MIN_ADMISSION_TTL_S = 10;
export const MAX_ADMISSION_TTL_S = 3600;

/** `name`: 1-200 characters, no control characters; required on create, optional on PATCH. */
export function ProductName(opts: { optional: boolean }): PropertyDecorator {
  const doc = { minLength: 1, maxLength: 200, example: 'Limited sneaker' };
  return applyDecorators(
    ...(opts.optional ? [ApiPropertyOptional(doc), IsOptional()] : [ApiProperty(doc)]),
    IsString(),
    Length(1, 200),
    Matches(/^\P{Cc}*$/u, { message: 'name must not contain control characters' }),
  );
}

/** `limitPerUser`: 1..MAX_LIMIT_PER_USER units per user; absent keeps the default (1) or the current value. */
export function LimitPerUser(): PropertyDecorator {
  return applyDecorators(
    ApiPropertyOptional({
      minimum: 1,
      maximum: MAX_LIMIT_PER_USER,
      description: 'units one user may order; default 1',
    }),
    IsOptional(),
    IsInt(),
    Min(1),
    Max(MAX_LIMIT_PER_USER),
  );
}

/** An ISO 8601 instant with its zone: `2026-11-22T10:00:00Z`, `2026-11-22T11:00:00.5+01:00`. */
const INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$/i;

/** A string that is an instant with a zone becomes a Date; anything else stays as given and fails IsDate. */
function toInstant({ value }: { value: unknown }): unknown {
  // strict: a day that does not exist in its month (2026-02-30) is refused, not rolled over.
  if (typeof value !== 'string' || !INSTANT.test(value) || !isISO8601(value, { strict: true, strictSeparator: true }))
    return value;
  const at = new Date(value);
  return Number.isNaN(at.getTime()) ? value : at;
}

/** `startsAt` / `endsAt`: an instant with a zone, or null for an open end; absent leaves it as it is. */
export function SaleInstant(what: string): PropertyDecorator {
  return applyDecorators(
    ApiPropertyOptional({
      type: String,
      format: 'date-time',
      nullable: true,
      description: `${what}: an ISO 8601 instant with a zone, or null for open`,
    }),
    Transform(toInstant),
    ValidateIf((_o, v) => v !== null && v !== undefined),
    IsDate({
      message: `${what.split(' ')[0]} must be an ISO 8601 instant with a zone (e.g. 2026-11-22T10:00:00Z) or null`,
    }),
  );
}

export function PaymentTimeout(): PropertyDecorator {
  return applyDecorators(
    ApiPropertyOptional({
      minimum: 1,
      maximum: MAX_PAYMENT_TIMEOUT_S,
      default: 900,
      description: 'seconds a reservation waits for payment',
    }),
    IsOptional(),
    IsInt(),
    Min(1),
    Max(MAX_PAYMENT_TIMEOUT_S),
  );
}

/** `waitingRoom`: sell only to buyers admitted from the product's queue (docs/waiting-room.md). */
export function WaitingRoom(): PropertyDecorator {
  return applyDecorators(
    ApiPropertyOptional({
      type: Boolean,
      default: false,
      description: "sell only to buyers admitted from the product's queue (POST /products/:id/queue)",
    }),
    IsOptional(),
    IsBoolean({ message: 'waitingRoom must be true or false' }),
  );
}

/** `admissionTtlS`: how long an admission from the queue lasts. */
export function AdmissionTtl(): PropertyDecorator {
  return applyDecorators(
    ApiPropertyOptional({
      minimum: MIN_ADMISSION_TTL_S,
      maximum: MAX_ADMISSION_TTL_S,
      default: 120,
      description: 'seconds an admitted buyer has to order before the place goes to the next ticket',
    }),
    IsOptional(),
    IsInt(),
    Min(MIN_ADMISSION_TTL_S),
    Max(MAX_ADMISSION_TTL_S),
  );
}

/** `proofOfWork`: joining the queue needs a solved proof-of-work challenge (docs/proof-of-work.md). */
export function ProofOfWork(): PropertyDecorator {
  return applyDecorators(
    ApiPropertyOptional({
      type: Boolean,
      default: false,
      description:
        'joining the queue needs a solved proof-of-work challenge (GET /products/:id/queue/challenge, then the X-Proof-Of-Work header)',
    }),
    IsOptional(),
    IsBoolean({ message: 'proofOfWork must be true or false' }),
  );
}

/** `continueUrl`: the shop's page the waiting page sends an admitted buyer to (with the admission token), or null. */
export function ContinueUrl(): PropertyDecorator {
  return applyDecorators(
    ApiPropertyOptional({
      type: String,
      nullable: true,
      maxLength: 2048,
      example: 'https://shop.example/checkout/42',
      description:
        "the shop's page an admitted buyer continues to from the waiting page, with ?admission=<token> added; null: the page shows the token",
    }),
    ValidateIf((_o, v) => v !== null && v !== undefined),
    IsString({ message: 'continueUrl must be an http:// or https:// URL, or null' }),
    MaxLength(2048),
    IsUrl(
      { protocols: ['http', 'https'], require_protocol: true, require_tld: false },
      { message: 'continueUrl must be an http:// or https:// URL, or null' },
    ),
  );
}
