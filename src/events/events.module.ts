// The order event stream: events written with each change (triggers and the code's own statements,
// in the change's transaction), read by the shop through GET /events, delivered to WEBHOOK_URL, and
// pruned after EVENTS_RETENTION_S.
import { Module } from '@nestjs/common';
import { EventPruner } from './event-pruner';
import { EventsController } from './events.controller';
import { EventsRepository } from './events.repository';
import { EventsService } from './events.service';
import { ShopOrAdminGuard } from './shop-or-admin.guard';
import { WebhookDispatcher } from './webhook-dispatcher';

@Module({
  controllers: [EventsController],
  providers: [EventsRepository, EventsService, WebhookDispatcher, EventPruner, ShopOrAdminGuard],
  exports: [EventsRepository],
})
export class EventsModule {}
