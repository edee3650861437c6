import { EventsPart, renderEvents, summarise } from './events';
import type { ScenarioCosts } from './costs';

const costs = (pgCpuUs: number | null, walBytes: number): ScenarioCosts =>
  ({ perUnit: { pgCpuUs, pgWalBytes: walBytes, targetCpuUs: 100 } }) as unknown as ScenarioCosts;

const part = (
  mode: EventsPart['mode'],
  round: number,
  orders: number,
  elapsedS: number,
  pgCpuUs: number | null,
): EventsPart => ({
  mode,
  round,
  orders,
  elapsedS,
  perSec: orders / elapsedS,
  latencyMs: { p50: round, p99: 10 * round, max: 0, mean: 0 },
  statusCounts: { '201': orders },
  costs: costs(pgCpuUs, 1000),
  events: mode === 'events' ? orders : 0,
});

describe('the event outbox benchmark arithmetic', () => {
  const parts = [
    part('events', 1, 900, 1, 200),
    part('no-events', 1, 1000, 1, 150),
    part('no-events', 2, 1000, 1, 150),
    part('events', 2, 1100, 1, 300),
  ];

  it('adds up the rounds of one mode: orders over time, costs weighted by orders, the worst p99', () => {
    expect(summarise(parts, 'events')).toEqual({
      mode: 'events',
      orders: 2000,
      elapsedS: 2,
      perSec: 1000,
      p50Ms: 1.5,
      p99Ms: 20,
      pgCpuUsPerOrder: (900 * 200 + 1100 * 300) / 2000,
      pgWalBytesPerOrder: 1000,
      serviceCpuUsPerOrder: 100,
      eventsPerOrder: 1,
    });
  });

  it('says n/a for a cost a part could not measure, and renders the ratio against its target', () => {
    const row = summarise([part('events', 1, 10, 1, null)], 'events');
    expect(row.pgCpuUsPerOrder).toBeNull();
    const md = renderEvents({
      startedAt: 'then',
      machine: { cores: 2, memoryGb: 24, node: 'v20' },
      durationS: 8,
      rounds: 2,
      connections: 100,
      segments: 20,
      parts,
      rows: [summarise(parts, 'events'), summarise(parts, 'no-events')],
      ratio: 0.5,
      target: 0.9,
    });
    expect(md).toContain('Ratio with / without: 0.50x** (target >= 0.9x: MISSED)');
    expect(md).toContain('| with events (as shipped) | 2000 | 1000 |');
  });
});
