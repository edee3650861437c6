import { Module } from '@nestjs/common';
import { InventoryModule } from '../inventory/inventory.module';
import { BuyerIdentityService } from './buyer-identity.service';
import { DoorService } from './door.service';
import { RateLimitsService } from './rate-limits.service';

@Module({
  imports: [InventoryModule],
  providers: [BuyerIdentityService, RateLimitsService, DoorService],
  exports: [DoorService],
})
export class DoorModule {}
