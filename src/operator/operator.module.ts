// The operator page: a static page under /admin and the live figures it polls; the service's icon.
import { Module } from '@nestjs/common';
import { EventsModule } from '../events/events.module';
import { FaviconController } from './favicon.controller';
import { LiveStatsService } from './live-stats.service';
import { OperatorController } from './operator.controller';
import { OperatorRepository } from './operator.repository';

@Module({
  imports: [EventsModule],
  controllers: [OperatorController, FaviconController],
  providers: [LiveStatsService, OperatorRepository],
})
export class OperatorModule {}
