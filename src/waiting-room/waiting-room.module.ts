// The waiting room: a product's queue in PostgreSQL (one row per ticket), the buyers' signed
// tickets, and the admissions it hands out (through AdmissionsModule, which the order path uses too).
import { Module } from '@nestjs/common';
import { AdmissionsModule } from '../admissions/admissions.module';
import { InventoryModule } from '../inventory/inventory.module';
import { Admitter } from './admitter';
import { ChallengeController } from './challenge.controller';
import { QueueStates } from './queue-states';
import { WaitingRoomController } from './waiting-room.controller';
import { WaitingRoomRepository } from './waiting-room.repository';
import { WaitingRoomService } from './waiting-room.service';

@Module({
  imports: [InventoryModule, AdmissionsModule],
  controllers: [WaitingRoomController, ChallengeController],
  providers: [WaitingRoomRepository, QueueStates, Admitter, WaitingRoomService],
})
export class WaitingRoomModule {}
