import { Module } from '@nestjs/common';
import { InventoryModule } from '../inventory/inventory.module';
import { BuyerIdentity } from './buyer-identity.service';
import { Door } from './door.service';
import { RateLimits } from './rate-limits.service';

@Module({
  imports: [InventoryModule],
  providers: [BuyerIdentity, RateLimits, Door],
  exports: [Door],
})
export class DoorModule {}
