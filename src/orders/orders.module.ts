import { Module } from '@nestjs/common';
import { InventoryModule } from '../inventory/inventory.module';
import { AdmissionsModule } from '../admissions/admissions.module';
import { ExpirySweeperService } from './expiry-sweeper.service';
import { OrdersController } from './orders.controller';
import { OrdersService } from './orders.service';
import { OrderLifecycleRepository } from './repositories/order-lifecycle.repository';
import { OrderReadsRepository } from './repositories/order-reads.repository';
import { OutcomesRepository } from './repositories/outcomes.repository';
import { SaleWritesRepository } from './repositories/sale-writes.repository';
import { LockService } from './sale/lock.service';
import { OrderGateService } from './sale/order-gate.service';
import { SegmentLockingService } from './sale/segment-locking.service';

@Module({
  imports: [InventoryModule, AdmissionsModule],
  controllers: [OrdersController],
  providers: [
    OrdersService,
    OrderGateService,
    ExpirySweeperService,
    SaleWritesRepository,
    OrderReadsRepository,
    OrderLifecycleRepository,
    OutcomesRepository,
    SegmentLockingService,
    LockService,
  ],
})
export class OrdersModule {}
