// The webhook: with WEBHOOK_URL set, the stream's events are POSTed there in order, in batches of
// up to WEBHOOK_BATCH, signed (webhook-signature.ts). One process of the deployment delivers at a
// time: it holds a lease on the webhook's mark in PostgreSQL, renewed every step, and a process
// that dies mid-delivery leaves the cursor where it was, so the next holder (after the lease lapses)
// sends that batch again: at least once. A batch that fails WEBHOOK_MAX_ATTEMPTS times in a row
// (an answer other than 2xx, a timeout, no answer) is set aside as a dead letter and delivery goes
// on past it; the wait between attempts doubles from WEBHOOK_BACKOFF_MS up to a minute.
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { Injectable, Logger, OnApplicationBootstrap, OnApplicationShutdown } from '@nestjs/common';
import { EventsConfig } from '../config/app-config';
import { MetricsService } from '../metrics/metrics.service';
import { parseCursor } from './event-cursor';
import { EVENT_CLOCK, EventsRepository, StreamEvent } from './events.repository';
import { SIGNATURE_HEADER, signatureHeader } from './webhook-signature';

const MAX_BACKOFF_MS = 60_000;

/** The wait before the next attempt after `failures` failed ones in a row. */
export function backoffMs(firstMs: number, failures: number): number {
  return Math.min(MAX_BACKOFF_MS, firstMs * 2 ** Math.max(0, failures - 1));
}

export type DeliveryOutcome = { ok: true } | { ok: false; outcome: 'failed' | 'timeout' | 'error'; error: string };

@Injectable()
export class WebhookDispatcher implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('Webhook');
  private readonly owner = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  private readonly stop = new AbortController();
  private running: Promise<void> | null = null;
  private opened = false;
  private retryAt = 0;
  private failing = false;

  constructor(
    private readonly config: EventsConfig,
    private readonly repo: EventsRepository,
    private readonly metrics: MetricsService,
  ) {}

  /** How long a lease lasts: a delivery that times out, twice, and some. */
  get leaseMs(): number {
    return 2 * this.config.webhookTimeoutMs + 5000;
  }

  onApplicationBootstrap(): void {
    if (this.config.webhookUrl === undefined) return;
    this.log.log(`delivering the event stream to ${new URL(this.config.webhookUrl).origin}`);
    this.running = this.loop();
  }

  async onApplicationShutdown(): Promise<void> {
    this.stop.abort();
    await this.running;
  }

  private async loop(): Promise<void> {
    while (!this.stop.signal.aborted) {
      let waitMs: number;
      try {
        waitMs = await this.step();
        if (this.failing) this.log.log('the event stream is readable again');
        this.failing = false;
      } catch (err) {
        // PostgreSQL away: said once per outage; the next step tries again.
        if (!this.failing) this.log.warn(`webhook delivery paused: ${(err as Error).message}`);
        this.failing = true;
        waitMs = 5 * this.config.pollMs;
      }
      // Wake often enough to renew the lease while backing off.
      waitMs = Math.min(waitMs, this.leaseMs / 3);
      if (waitMs > 0) await sleep(waitMs, undefined, { signal: this.stop.signal }).catch(() => undefined);
    }
  }

  /** One step: lease, read, deliver, record. Answers how long to wait before the next. */
  async step(): Promise<number> {
    if (!this.opened) {
      await this.repo.openWebhook();
      this.opened = true;
    }
    const mark = await this.repo.leaseWebhook(this.owner, this.leaseMs);
    if (mark === null) {
      // Another process delivers; this one is ready to take over when its lease lapses.
      this.retryAt = 0;
      return this.leaseMs / 3;
    }
    if (mark.failures > 0 && Date.now() < this.retryAt) return this.retryAt - Date.now();
    const events = await this.repo.after(mark.cursor, this.config.webhookBatch, undefined, EVENT_CLOCK);
    if (events.length === 0) {
      this.metrics.webhookLagSeconds.set(0);
      return this.config.pollMs;
    }
    this.metrics.webhookLagSeconds.set(Math.max(0, (Date.now() - Date.parse(events[0].at)) / 1000));
    const sent = await this.post(events);
    if (sent.ok) {
      this.metrics.webhookDeliveries.inc({ outcome: 'delivered' });
      const last = parseCursor(events[events.length - 1].cursor);
      if (last && (await this.repo.delivered(this.owner, last))) this.metrics.webhookEventsDelivered.inc(events.length);
      return 0;
    }
    this.metrics.webhookDeliveries.inc({ outcome: sent.outcome });
    const failures = await this.repo.failed(this.owner, sent.error);
    if (failures === null) return this.config.pollMs;
    if (failures >= this.config.webhookMaxAttempts) {
      if (await this.repo.deadLetter(this.owner, events, failures, sent.error)) {
        this.metrics.webhookDeadLetters.inc(events.length);
        this.log.warn(
          `webhook: ${events.length} events (${events[0].cursor} to ${events[events.length - 1].cursor}) set aside as a dead letter after ${failures} failed deliveries: ${sent.error}`,
        );
      }
      this.retryAt = 0;
      return 0;
    }
    const wait = backoffMs(this.config.webhookBackoffMs, failures);
    this.retryAt = Date.now() + wait;
    return wait;
  }

  /** One POST of a batch; never throws. */
  async post(events: StreamEvent[]): Promise<DeliveryOutcome> {
    const body = JSON.stringify({ events });
    const timeout = AbortSignal.timeout(this.config.webhookTimeoutMs);
    try {
      const res = await fetch(this.config.webhookUrl as string, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          [SIGNATURE_HEADER]: signatureHeader(this.config.webhookSecret as string, body, Math.floor(Date.now() / 1000)),
        },
        body,
        signal: AbortSignal.any([timeout, this.stop.signal]),
      });
      await res.arrayBuffer();
      if (res.status >= 200 && res.status < 300) return { ok: true };
      return { ok: false, outcome: 'failed', error: `HTTP ${res.status}` };
    } catch (err) {
      if (timeout.aborted)
        return { ok: false, outcome: 'timeout', error: `no answer in ${this.config.webhookTimeoutMs} ms` };
      return { ok: false, outcome: 'error', error: (err as Error).message };
    }
  }
}
