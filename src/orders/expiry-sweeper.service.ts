// Expiry: every EXPIRY_SWEEP_MS each process looks in PostgreSQL for reservations past their
// expiresAt and expires them, returning their units (OrderLifecycleRepository.expireDue). Every process
// sweeps; SKIP LOCKED shares the work, so a process that dies mid-sweep only delays its orders
// to the next sweep of any process. Nothing here depends on Redis: after a flush or an outage the
// sweep goes on, and only the clearing of hints waits for Redis.
import { Injectable, Logger, OnApplicationBootstrap, OnApplicationShutdown } from '@nestjs/common';
import { InventoryConfig } from '../config/app-config';
import { MetricsService } from '../metrics/metrics.service';
import { OrderLifecycleRepository } from './repositories/order-lifecycle.repository';
import { OrdersService } from './orders.service';

/** Reservations expired per product and transaction: bounds how long one sweep holds row locks. */
const SWEEP_BATCH = 500;
/** Products looked at per sweep. */
const SWEEP_PRODUCTS = 100;

@Injectable()
export class ExpirySweeperService implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger(ExpirySweeperService.name);
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private stopped = false;
  private failing = false;

  constructor(
    private readonly inventory: InventoryConfig,
    private readonly repository: OrderLifecycleRepository,
    private readonly orders: OrdersService,
    private readonly metrics: MetricsService,
  ) {}

  onApplicationBootstrap(): void {
    if (this.inventory.expirySweepMs > 0) this.schedule();
  }

  async onApplicationShutdown(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** One sweep over every product with due reservations; resolves with the number of orders expired. */
  async sweep(): Promise<number> {
    const started = process.hrtime.bigint();
    let expired = 0;
    for (const productId of await this.repository.productsWithDueReservations(SWEEP_PRODUCTS)) {
      for (;;) {
        const done = await this.repository.expireDue(productId, SWEEP_BATCH);
        if (done.orders === 0) break;
        expired += done.orders;
        this.metrics.orderTransitions.inc({ to: 'expired' }, done.orders);
        for (const lag of done.lagsMs) this.metrics.expiryLagSeconds.observe(Math.max(0, lag) / 1000);
        if (done.returned) await this.orders.unitsReturned(done.returned, 'expired');
        if (done.orders < SWEEP_BATCH || this.stopped) break;
      }
    }
    this.metrics.sweepSeconds.observe(Number(process.hrtime.bigint() - started) / 1e9);
    return expired;
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.sweep().then(
        (n) => {
          if (this.failing) this.logger.log('expiry sweep works again');
          this.failing = false;
          if (n > 0) this.logger.debug(`expired ${n} reservations`);
        },
        (err: Error) => {
          // PostgreSQL away: the next sweep tries again; said once per outage, not every tick.
          if (!this.failing) this.logger.warn(`expiry sweep failed: ${err.message}`);
          this.failing = true;
        },
      );
      void this.running.finally(() => this.schedule());
    }, this.inventory.expirySweepMs);
    this.timer.unref();
  }
}
