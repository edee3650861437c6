import { Module } from '@nestjs/common';
import { InventoryModule } from '../inventory/inventory.module';
import { BuyerIdentityService } from './buyer-identity.service';
import { DoorService } from './door.service';
import { LoadShedder } from './load-shedder';
import { RateLimitsService } from './rate-limits.service';

@Module({
  imports: [InventoryModule],
  providers: [BuyerIdentityService, RateLimitsService, LoadShedder, DoorService],
  exports: [DoorService, LoadShedder],
})
export class DoorModule {}
