// The operator page: a static page under /admin and the live figures it polls.
import { Module } from '@nestjs/common';
import { EventsModule } from '../events/events.module';
import { LiveStatsService } from './live-stats.service';
import { OperatorController } from './operator.controller';
import { OperatorRepository } from './operator.repository';

@Module({
  imports: [EventsModule],
  controllers: [OperatorController],
  providers: [LiveStatsService, OperatorRepository],
})
export class OperatorModule {}
