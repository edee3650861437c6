// Proof of work at the queue: the challenges, and the join's check that the door makes (the challenge
// route is the waiting room's). Global so that the door and the waiting room use them without importing this module.
import { Global, Module } from '@nestjs/common';
import { InventoryModule } from '../inventory/inventory.module';
import { JoinProof } from './join-proof';
import { ProofOfWorkService } from './proof-of-work.service';

@Global()
@Module({
  imports: [InventoryModule],
  providers: [ProofOfWorkService, JoinProof],
  exports: [ProofOfWorkService, JoinProof],
})
export class ProofOfWorkModule {}
