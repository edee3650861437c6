// Gives every module each configuration area under its own class, so a service injects only the
// slices it reads (`constructor(locks: LocksConfig)`), never the whole configuration.
import { DynamicModule, Global, Module, Provider } from '@nestjs/common';
import { CONFIG_AREAS, ResolvedConfig } from './app-config';

@Global()
@Module({})
export class AppConfigModule {
  static forRoot(config: ResolvedConfig): DynamicModule {
    const providers: Provider[] = Object.entries(CONFIG_AREAS).map(([key, area]) => ({
      provide: area,
      useValue: config[key as keyof ResolvedConfig],
    }));
    return { module: AppConfigModule, providers, exports: providers };
  }
}
