// Body of POST /orders/:id/pay and POST /orders/:id/cancel: who claims the order.
import { UserId } from '../../common/user-id.decorator';

export class OrderOwnerDto {
  @UserId("the order's userId: 1-64 characters of [A-Za-z0-9_.:-], or a positive integer")
  userId: string;
}
