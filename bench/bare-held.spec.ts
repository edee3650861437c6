// The bare-held peer pair: the bare peer holding each lock BARE_HELD_MS on one segment and on the
// speed segments, so that the segments-against-one-lock target has this machine's floor beside it.
// Its plan (one peer start, two scenarios) and where the report puts it, on a fixed report.
import { BenchmarkReport, renderMarkdown, targets } from './report';
import { BARE_HELD_MS, plan, PlanOptions, ScenarioResult } from './scenarios';

const options: PlanOptions = {
  holds: [0, 20],
  segments: [20],
  sweep: null,
  sweepHold: 20,
  peer: false,
  sale: null,
  returns: null,
  steadyStock: 1_000_000,
  workers: 2,
  speedWorkers: 1,
  speedSegments: 20,
  batchMax: null,
  peers: ['bare-held'],
  batch: true,
  batchSweep: null,
  soldOut: false,
  redisSetups: false,
};

const row = (s: Partial<ScenarioResult>): ScenarioResult =>
  ({
    kind: 'steady',
    target: 'service',
    locking: 'redlock',
    workers: 1,
    holdMs: 0,
    segments: 20,
    stock: 1_000_000,
    batchMax: 1,
    groups: ['batch'],
    status: 'ok',
    statusCounts: { '201': 3000 },
    created: 3000,
    responses: 3000,
    errors: 0,
    timeouts: 0,
    latency201Ms: { p50: 10, p99: 40, max: 60 },
    metrics: { source: 'all-workers', note: '' },
    verification: { verified: true, checks: [], audit: null },
    ...s,
  }) as ScenarioResult;

function reportWith(scenarios: ScenarioResult[]): BenchmarkReport {
  return {
    startedAt: '2026-11-22T00:00:00Z',
    finishedAt: '2026-11-22T00:01:00Z',
    command: 'node dist/bench/run.js --peers bare-held',
    machine: { cores: 2, cpuModel: 'test', memoryGb: 4, os: 'Linux', node: 'v20', postgres: 'PostgreSQL 17', redis: '7.0.15' },
    settings: {
      ...options,
      quick: false,
      durationS: 10,
      connections: 100,
      warmUpS: 3,
      batchMaxRead: true,
      holdsMax: null,
      lock: { ttlMs: 2000, waitMs: 30000, retryDelayMs: 4, retryJitterMs: 8 },
      dependencies: { postgres: 'embedded', redis: 'redis-server' },
    },
    scenarios,
    services: [],
    rssTargetMb: 200,
  };
}

const service = [
  row({ id: 'redlock-w1-b1-h20-s1', holdMs: 20, segments: 1, ordersPerSec: 40 }),
  row({ id: 'redlock-w1-b1-h20-s20', holdMs: 20, segments: 20, ordersPerSec: 700 }),
];
const bare = [
  row({ id: 'bare-h20-s1', target: 'bare', batchMax: null, groups: ['speed'], holdMs: 20, segments: 1, ordersPerSec: 38 }),
  row({ id: 'bare-h20-s20', target: 'bare', batchMax: null, groups: ['speed'], holdMs: 20, segments: 20, ordersPerSec: 684 }),
];
const segmentsTarget = (r: BenchmarkReport) => targets(r).find((t) => t.target.includes('segments >= 19x one lock'))!;

describe('the bare peer with its lock held (bare-held)', () => {
  it('should start the bare peer once at the target hold and load it on one segment and on the speed segments', () => {
    const configs = plan(options).filter((c) => c.target === 'bare');
    expect(configs.map((c) => [c.locking, c.holdMs, c.workers, c.batchMax])).toEqual([['redlock', BARE_HELD_MS, 1, null]]);
    expect(configs[0].scenarios.map((s) => [s.id, s.segments])).toEqual([
      ['bare-h20-s1', 1],
      ['bare-h20-s20', 20],
    ]);
  });

  it("should put the bare peer's ratio at the same hold beside the service's in the segments-against-one-lock target", () => {
    const row = segmentsTarget(reportWith([...service, ...bare]));
    expect(row.result).toBe('miss');
    expect(row.measured).toBe('17.50x (700 / 40.0 orders/s); the bare peer at the same hold: 18.00x (684 / 38.0)');
    // Without the pair the target reads as before.
    expect(segmentsTarget(reportWith(service)).measured).toBe('17.50x (700 / 40.0 orders/s)');
  });

  it('should list both rows and their ratio in the peers table, marked with the hold', () => {
    const md = renderMarkdown(reportWith([...service, ...bare]));
    expect(md).toContain(`| bare peer, one lock (1 segment), lock held ${BARE_HELD_MS} ms | **38.0** |`);
    expect(md).toContain(`| bare peer, Redis segment locks, lock held ${BARE_HELD_MS} ms | **684** |`);
    expect(md).toContain(`| bare peer, lock held ${BARE_HELD_MS} ms: 20 segments / one lock | **18.00x** |`);
  });
});
