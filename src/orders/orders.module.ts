import { Module } from '@nestjs/common';
import { LocksConfig } from '../config/app-config';
import { InventoryModule } from '../inventory/inventory.module';
import { LocksModule } from '../locks/locks.module';
import { AdmissionsModule } from '../admissions/admissions.module';
import { RedlockSegmentLocking } from './locking/redlock-segment-locking';
import { RowLockSegmentLocking } from './locking/row-lock-segment-locking';
import { SegmentLocking } from './locking/segment-locking';
import { ExpirySweeperService } from './expiry-sweeper.service';
import { OrderGateService } from './order-gate.service';
import { OrdersController } from './orders.controller';
import { OrdersService } from './orders.service';
import { OrderLifecycleRepository } from './repositories/order-lifecycle.repository';
import { OrderReadsRepository } from './repositories/order-reads.repository';
import { OutcomesRepository } from './repositories/outcomes.repository';
import { SaleWritesRepository } from './repositories/sale-writes.repository';

@Module({
  imports: [InventoryModule, LocksModule, AdmissionsModule],
  controllers: [OrdersController],
  providers: [
    OrdersService,
    OrderGateService,
    ExpirySweeperService,
    SaleWritesRepository,
    OrderReadsRepository,
    OrderLifecycleRepository,
    OutcomesRepository,
    RedlockSegmentLocking,
    RowLockSegmentLocking,
    // The locking mode, chosen once from STOCK_LOCKING; the order path never asks which it is.
    {
      provide: SegmentLocking,
      inject: [LocksConfig, RedlockSegmentLocking, RowLockSegmentLocking],
      useFactory: (config: LocksConfig, redlock: RedlockSegmentLocking, rowLock: RowLockSegmentLocking) =>
        config.stockLocking === 'database' ? rowLock : redlock,
    },
  ],
})
export class OrdersModule {}
