// Body of POST /admin/products.
import { ApiProperty } from '@nestjs/swagger';
import { IsInt, Max, Min } from 'class-validator';
import {
  AdmissionTtl,
  ContinueUrl,
  LimitPerUser,
  PaymentTimeout,
  ProductName,
  ProofOfWork,
  SaleInstant,
  WaitingRoom,
} from './sale-terms';

export const MAX_SEGMENTS = 1024;
export const MAX_STOCK = 1_000_000_000;

export class CreateProductDto {
  @ProductName({ optional: false })
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

  @LimitPerUser()
  limitPerUser?: number;

  @SaleInstant('startsAt: when the sale opens')
  startsAt?: Date | null;

  @SaleInstant('endsAt: when the sale closes, after startsAt')
  endsAt?: Date | null;

  @PaymentTimeout()
  paymentTimeoutS?: number;

  @WaitingRoom()
  waitingRoom?: boolean;

  @AdmissionTtl()
  admissionTtlS?: number;

  @ProofOfWork()
  proofOfWork?: boolean;

  @ContinueUrl()
  continueUrl?: string | null;
}
