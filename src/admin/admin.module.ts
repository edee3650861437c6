import { Module } from '@nestjs/common';
import { InventoryModule } from '../inventory/inventory.module';
import { AdminController } from './admin.controller';
import { AdminTokenGuard } from './admin-token.guard';

@Module({
  imports: [InventoryModule],
  controllers: [AdminController],
  providers: [AdminTokenGuard],
})
export class AdminModule {}
