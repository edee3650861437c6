import { Module } from '@nestjs/common';
import { InventoryModule } from '../inventory/inventory.module';
import { LocksModule } from '../locks/locks.module';
import { WaitingRoomModule } from '../waiting-room/waiting-room.module';
import { RedlockSegmentLocking } from './locking/redlock-segment-locking';
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
  imports: [InventoryModule, LocksModule, WaitingRoomModule],
  controllers: [OrdersController],
  providers: [
    OrdersService,
    OrderGateService,
    ExpirySweeperService,
    SaleWritesRepository,
    OrderReadsRepository,
    OrderLifecycleRepository,
    OutcomesRepository,
    { provide: SegmentLocking, useClass: RedlockSegmentLocking },
  ],
})
export class OrdersModule {}
