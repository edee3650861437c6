// Admissions, below both the waiting room (which issues them) and the order path (which spends them).
import { Module } from '@nestjs/common';
import { AdmissionsRepository } from './admissions.repository';
import { AdmissionsService } from './admissions.service';

@Module({
  providers: [AdmissionsRepository, AdmissionsService],
  exports: [AdmissionsService],
})
export class AdmissionsModule {}
