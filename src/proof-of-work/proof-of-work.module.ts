// Proof of work at the queue: the challenge route, and the guard the join route carries. Global so
// that the waiting room's controller can name the guard without importing this module.
import { Global, Module } from '@nestjs/common';
import { InventoryModule } from '../inventory/inventory.module';
import { ProofOfWorkController } from './proof-of-work.controller';
import { ProofOfWorkGuard } from './proof-of-work.guard';
import { ProofOfWorkService } from './proof-of-work.service';

@Global()
@Module({
  imports: [InventoryModule],
  controllers: [ProofOfWorkController],
  providers: [ProofOfWorkService, ProofOfWorkGuard],
  exports: [ProofOfWorkService, ProofOfWorkGuard],
})
export class ProofOfWorkModule {}
