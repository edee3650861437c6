// The buyer's waiting page: a static page per waiting-room product, served by the service.
import { Module } from '@nestjs/common';
import { InventoryModule } from '../inventory/inventory.module';
import { WaitPageController } from './wait-page.controller';

@Module({
  imports: [InventoryModule],
  controllers: [WaitPageController],
})
export class WaitPageModule {}
