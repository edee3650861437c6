// The load shedder refuses joins first, then new orders, then the calls that settle an order, each
// above its own event-loop delay, and counts what it refused.
import { OverloadConfig } from '../config/app-config';
import { MetricsService } from '../metrics/metrics.service';
import { LoadShedder, ShedClass } from './load-shedder';

function shedder(lagMs: number[], ordersInFlight = 256) {
  const metrics = new MetricsService();
  const s = new LoadShedder(Object.assign(new OverloadConfig(), { lagMs, ordersInFlight }), metrics);
  let delay = 0;
  s.measureWith(() => delay);
  return { s, metrics, setDelay: (ms: number) => (delay = ms) };
}

const shedAt = (s: LoadShedder): ShedClass[] => (['join', 'order', 'settle'] as const).filter((c) => s.sheds(c));

describe('LoadShedder', () => {
  it('should shed joins, then new orders, then the rest as the event-loop delay passes each level', () => {
    const { s, setDelay } = shedder([100, 200, 400]);
    expect(shedAt(s)).toEqual([]);
    setDelay(100);
    expect(shedAt(s)).toEqual([]);
    setDelay(101);
    expect(shedAt(s)).toEqual(['join']);
    setDelay(250);
    expect(shedAt(s)).toEqual(['join', 'order']);
    expect(s.level()).toBe(2);
    setDelay(5000);
    expect(shedAt(s)).toEqual(['join', 'order', 'settle']);
    setDelay(0);
    expect(shedAt(s)).toEqual([]);
  });

  it('should shed nothing when shedding is off, however late the loop', () => {
    const { s, setDelay } = shedder([]);
    setDelay(60_000);
    expect(shedAt(s)).toEqual([]);
    expect(s.level()).toBe(0);
  });

  it('should count each shed call by its class and show the delay and level in /metrics', async () => {
    const { s, metrics, setDelay } = shedder([100, 200, 400]);
    setDelay(250);
    shedAt(s);
    shedAt(s);
    const text = await metrics.registry.metrics();
    expect(text).toContain('flashsale_shed_total{class="join"} 2');
    expect(text).toContain('flashsale_shed_total{class="order"} 2');
    expect(text).toContain('flashsale_shed_total{class="settle"} 0');
    expect(text).toContain('flashsale_event_loop_delay_seconds 0.25');
    expect(text).toContain('flashsale_shedding_level 2');
  });

  it('should shed a new order while the process has SHED_ORDERS_IN_FLIGHT orders on the order path, and admit again as they end', async () => {
    const { s, metrics } = shedder([100, 200, 400], 2);
    const first = s.admitsOrder();
    const second = s.admitsOrder();
    expect([first, second].every((a) => a !== null)).toBe(true);
    expect(s.admitsOrder()).toBeNull();
    // Ending one twice frees one place only.
    first?.done();
    first?.done();
    const third = s.admitsOrder();
    expect(third).not.toBeNull();
    expect(s.admitsOrder()).toBeNull();
    second?.done();
    third?.done();
    expect(s.admitsOrder()).not.toBeNull();
    expect(await metrics.registry.metrics()).toContain('flashsale_shed_total{class="order"} 2');
  });

  it('should not bound the orders in flight with SHED_ORDERS_IN_FLIGHT=0, nor admit an order while orders are shed for the delay', () => {
    const { s, setDelay } = shedder([100, 200, 400], 0);
    expect(Array.from({ length: 10_000 }, () => s.admitsOrder()).every((a) => a !== null)).toBe(true);
    setDelay(201);
    expect(s.admitsOrder()).toBeNull();
  });
});
