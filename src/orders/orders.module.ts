import { Module } from '@nestjs/common';
import { InventoryModule } from '../inventory/inventory.module';
import { LocksModule } from '../locks/locks.module';
import { OrdersController } from './orders.controller';
import { OrderGateService } from './order-gate.service';
import { OrdersRepository } from './orders.repository';
import { OrdersService } from './orders.service';

@Module({
  imports: [InventoryModule, LocksModule],
  controllers: [OrdersController],
  providers: [OrdersService, OrderGateService, OrdersRepository],
})
export class OrdersModule {}
