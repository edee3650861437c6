// The waiting room: a product's queue in Redis (spread over shards), admissions decided in
// PostgreSQL, and the tokens that let an admitted buyer order. The order path imports
// WaitingRoomService to check an admission.
import { Module } from '@nestjs/common';
import { InventoryModule } from '../inventory/inventory.module';
import { Admitter } from './admitter.service';
import { QueueStates } from './queue-states.service';
import { QueueStore } from './queue.store';
import { WaitingRoomController } from './waiting-room.controller';
import { WaitingRoomRepository } from './waiting-room.repository';
import { WaitingRoomService } from './waiting-room.service';

@Module({
  imports: [InventoryModule],
  controllers: [WaitingRoomController],
  providers: [WaitingRoomRepository, QueueStore, QueueStates, Admitter, WaitingRoomService],
  exports: [WaitingRoomService],
})
export class WaitingRoomModule {}
