// Proof of work at the queue: the challenge route, and the join's check that the door makes. Global
// so that the door (and the waiting page) can use them without importing this module.
import { Global, Module } from '@nestjs/common';
import { InventoryModule } from '../inventory/inventory.module';
import { ProofOfWorkController } from './proof-of-work.controller';
import { JoinProof } from './join-proof';
import { ProofOfWorkService } from './proof-of-work.service';

@Global()
@Module({
  imports: [InventoryModule],
  controllers: [ProofOfWorkController],
  providers: [ProofOfWorkService, JoinProof],
  exports: [ProofOfWorkService, JoinProof],
})
export class ProofOfWorkModule {}
