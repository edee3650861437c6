// The load shedder refuses joins first, then new orders, then the calls that settle an order, each
// above its own event-loop delay, and counts what it refused.
import { OverloadConfig } from '../config/app-config';
import { MetricsService } from '../metrics/metrics.service';
import { LoadShedder, ShedClass } from './load-shedder';

function shedder(lagMs: number[]) {
  const metrics = new MetricsService();
  const s = new LoadShedder(Object.assign(new OverloadConfig(), { lagMs }), metrics);
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
});
