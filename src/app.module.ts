// The application: built from a resolved configuration (dependency URLs known, token set).
import { DynamicModule, Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { LoggerModule } from 'nestjs-pino';
import type { Logger } from 'pino';
import { AdminModule } from './admin/admin.module';
import { ResolvedConfig } from './config/app-config';
import { AppConfigModule } from './config/config.module';
import { DoorModule } from './door/door.module';
import { EventsModule } from './events/events.module';
import { HealthModule } from './health/health.module';
import { dataSourceOptions } from './infrastructure/data-source';
import { InfrastructureModule } from './infrastructure/infrastructure.module';
import { loggerParams } from './logging/logger';
import { OperatorModule } from './operator/operator.module';
import { OrdersModule } from './orders/orders.module';
import { ProofOfWorkModule } from './proof-of-work/proof-of-work.module';
import { WaitPageModule } from './wait-page/wait-page.module';
import { WaitingRoomModule } from './waiting-room/waiting-room.module';

@Module({})
export class AppModule {
  static forRoot(config: ResolvedConfig, logger: Logger): DynamicModule {
    return {
      module: AppModule,
      imports: [
        LoggerModule.forRoot(loggerParams(logger)),
        AppConfigModule.forRoot(config),
        TypeOrmModule.forRoot(
          dataSourceOptions(config.database.url, {
            poolSize: config.database.poolSize,
            timeoutMs: config.database.timeoutMs,
          }),
        ),
        InfrastructureModule,
        DoorModule,
        ProofOfWorkModule,
        WaitingRoomModule,
        WaitPageModule,
        OrdersModule,
        AdminModule,
        EventsModule,
        OperatorModule,
        HealthModule,
      ],
    };
  }
}
