// Body of PATCH /admin/products/:id: any of the sale's terms; fields left out keep their value.
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

export class UpdateProductDto {
  @ProductName({ optional: true })
  name?: string;

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
