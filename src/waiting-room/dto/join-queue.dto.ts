// Body of POST /products/:id/queue. With buyer identity on, the token names the user and userId may
// be left out (the door fills it in, or refuses a different one).
import { UserId } from '../../common/user-id.decorator';

export class JoinQueueDto {
  @UserId()
  userId: string;
}
