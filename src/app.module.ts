// The application: built from a resolved configuration (dependency URLs known, token set).
import { randomUUID } from 'node:crypto';
import { DynamicModule, Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { LoggerModule } from 'nestjs-pino';
import type { Logger } from 'pino';
import { AdminModule } from './admin/admin.module';
import { ResolvedConfig } from './config/app-config';
import { AppConfigModule } from './config/config.module';
import { HealthModule } from './health/health.module';
import { dataSourceOptions } from './infrastructure/data-source';
import { InfrastructureModule } from './infrastructure/infrastructure.module';
import { OrdersModule } from './orders/orders.module';

@Module({})
export class AppModule {
  static forRoot(config: ResolvedConfig, logger: Logger): DynamicModule {
    return {
      module: AppModule,
      imports: [
        LoggerModule.forRoot({
          pinoHttp: {
            // The process's one logger, so request lines and every other line share one format.
            logger,
            genReqId: (req, res) => {
              const given = req.headers['x-request-id'];
              const id = typeof given === 'string' && /^[A-Za-z0-9_.:-]{1,100}$/.test(given) ? given : randomUUID();
              res.setHeader('X-Request-Id', id);
              return id;
            },
            redact: ['req.headers.authorization', 'req.headers.cookie'],
            // Lines of a request carry its id only, not the whole request serialised again.
            quietReqLogger: true,
            // Access lines are debug: at thousands of orders a second they would cost more than the order.
            customLogLevel: (_req, res, err) => (err || res.statusCode >= 500 ? 'warn' : 'debug'),
          },
        }),
        AppConfigModule.forRoot(config),
        TypeOrmModule.forRoot(dataSourceOptions(config.database.url, { poolSize: config.database.poolSize, timeoutMs: config.database.timeoutMs })),
        InfrastructureModule,
        OrdersModule,
        AdminModule,
        HealthModule,
      ],
    };
  }
}
