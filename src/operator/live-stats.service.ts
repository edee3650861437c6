// The operator page's live figures for the whole deployment, not just the process the page talks
// to: every process adds what its counters grew by (every LIVE_STATS_MS) to one Redis hash per second
// (`{flashsale:live}:<unix second>`, with its event-loop delay beside them; kept 5 minutes; one MULTI per process per second, in one hash
// slot on a Redis Cluster), and GET /admin/live adds up the last minute of those hashes. While Redis
// is away the deltas wait in the process and go out with the next flush that works.
import { randomUUID } from 'node:crypto';
import { Inject, Injectable, OnApplicationBootstrap, OnApplicationShutdown } from '@nestjs/common';
import { OperatorConfig } from '../config/app-config';
import { REDIS_CLIENT, RedisClient } from '../infrastructure/redis.providers';
import { MetricsService } from '../metrics/metrics.service';
import { Counters, deltas, SecondRecord } from './live-stats';

const KEY = (second: number) => `{flashsale:live}:${second}`;
const KEEP_S = 300;

@Injectable()
export class LiveStatsService implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly id = randomUUID().slice(0, 8);
  private flushed: Counters = {};
  private timer?: NodeJS.Timeout;
  private flushing?: Promise<void>;

  constructor(
    @Inject(REDIS_CLIENT) private readonly redis: RedisClient,
    private readonly metrics: MetricsService,
    private readonly config: OperatorConfig,
  ) {}

  onApplicationBootstrap(): void {
    if (this.config.liveStatsMs === 0) return;
    this.timer = setInterval(() => {
      this.flushing ??= this.flush()
        .catch(() => undefined)
        .finally(() => (this.flushing = undefined));
    }, this.config.liveStatsMs);
    this.timer.unref();
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.config.liveStatsMs === 0) return;
    clearInterval(this.timer);
    await this.flushing;
    await this.flush().catch(() => undefined);
  }

  /** This process's counters now, as flat fields. */
  async counters(): Promise<Counters> {
    const out: Counters = {};
    const add = (field: string, n: number) => (out[field] = (out[field] ?? 0) + n);
    for (const v of (await this.metrics.orders.get()).values) add(`o:${v.labels.outcome}`, v.value);
    for (const v of (await this.metrics.rateLimited.get()).values) add('rl', v.value);
    for (const v of (await this.metrics.fallovers.get()).values) add(`fo:${v.labels.reason}`, v.value);
    for (const v of (await this.metrics.dependencyErrors.get()).values) add(`dep:${v.labels.dependency}`, v.value);
    for (const v of (await this.metrics.shed.get()).values) add(`sh:${v.labels.class}`, v.value);
    for (const v of (await this.metrics.lockWaitSeconds.get()).values) {
      if (v.metricName?.endsWith('_count')) add('lw:n', v.value);
      if (v.metricName?.endsWith('_sum')) add('lw:ms', Math.round(v.value * 1000));
    }
    for (const v of (await this.metrics.orderSeconds.get()).values) {
      // Bucket rows carry `le` beside the histogram's own labels.
      const labels = v.labels as Record<string, string | number | undefined>;
      if (v.metricName?.endsWith('_bucket') && labels.outcome === 'created') add(`b:${labels.le}`, v.value);
    }
    return out;
  }

  /** Adds what grew since the last flush that worked to this second's record. */
  async flush(): Promise<void> {
    const now = await this.counters();
    const grew = deltas(this.flushed, now);
    const key = KEY(Math.floor(Date.now() / 1000));
    const tx = this.redis.multi();
    for (const [field, n] of Object.entries(grew)) tx.hincrby(key, field, n);
    tx.hset(key, `p:${this.id}`, 1);
    // A level, not a count: the page shows the slowest process's.
    tx.hset(key, `lag:${this.id}`, Math.round(this.metrics.loadProbe.delayMs()));
    tx.expire(key, KEEP_S);
    await tx.exec();
    this.flushed = now;
  }

  /** The deployment's records of seconds `from` to `to` (inclusive), those that exist. */
  async records(from: number, to: number): Promise<SecondRecord[]> {
    const seconds = Array.from({ length: to - from + 1 }, (_, i) => from + i);
    const tx = this.redis.pipeline();
    for (const s of seconds) tx.hgetall(KEY(s));
    const replies = (await tx.exec()) ?? [];
    return seconds
      .map((at, i) => {
        const [err, hash] = replies[i] ?? [null, {}];
        const fields: Counters = {};
        if (!err) for (const [k, v] of Object.entries(hash as Record<string, string>)) fields[k] = Number(v);
        return { at, fields };
      })
      .filter((r) => Object.keys(r.fields).length > 0);
  }
}
