// Deletes events older than EVENTS_RETENTION_S, once a minute, in batches; with a webhook, never
// one it has not delivered (or set aside as a dead letter). Every process runs it; an advisory lock
// lets one prune at a time.
import { Injectable, Logger, OnApplicationBootstrap, OnApplicationShutdown } from '@nestjs/common';
import { EventsConfig } from '../config/app-config';
import { MetricsService } from '../metrics/metrics.service';
import { EventsRepository } from './events.repository';

const EVERY_MS = 60_000;
const BATCH = 10_000;

@Injectable()
export class EventPruner implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('EventPruner');
  private timer?: NodeJS.Timeout;
  private running?: Promise<unknown>;
  private stopped = false;

  constructor(
    private readonly config: EventsConfig,
    private readonly repo: EventsRepository,
    private readonly metrics: MetricsService,
  ) {}

  onApplicationBootstrap(): void {
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = this.prune()
        .catch((err: Error) => this.log.warn(`pruning events failed: ${err.message}`))
        .finally(() => (this.running = undefined));
    }, EVERY_MS);
    this.timer.unref();
  }

  async onApplicationShutdown(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running;
  }

  /** Prunes what is due; answers how many events went. */
  async prune(): Promise<number> {
    let keep = null;
    if (this.config.webhookUrl !== undefined) {
      const mark = await this.repo.webhookMark();
      if (mark === null) return 0;
      keep = mark.cursor;
    }
    let total = 0;
    for (;;) {
      const n = await this.repo.prune(this.config.retentionS, keep, BATCH);
      total += n;
      this.metrics.eventsPruned.inc(n);
      if (n < BATCH || this.stopped) return total;
    }
  }
}
