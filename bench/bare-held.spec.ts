// The bare-held peer pair: the bare peer holding each lock BARE_HELD_MS on one segment and on the
// speed segments, so that the segments-against-one-lock target has this machine's floor beside it.
// Its plan (one peer start, two scenarios) and where the report puts it, on a fixed report.
import { planOptions, reportOf, scenarioRow } from './fixtures';
import { renderMarkdown, targets } from './report';
import { plan } from './scenarios';
import { BARE_HELD_MS, BenchmarkReport, PlanOptions, ScenarioResult } from './types';

const options: PlanOptions = { ...planOptions, peers: ['bare-held'], soldOut: false, redisSetups: false };

const row = (s: Partial<ScenarioResult>): ScenarioResult => scenarioRow({ batchMax: 1, groups: ['batch'], ...s });

const reportWith = (scenarios: ScenarioResult[]) =>
  reportOf(options, 'node dist/bench/run.js --peers bare-held', scenarios, false);

const service = [
  row({ id: 'redlock-w1-b1-h20-s1', holdMs: 20, segments: 1, ordersPerSec: 40 }),
  row({ id: 'redlock-w1-b1-h20-s20', holdMs: 20, segments: 20, ordersPerSec: 700 }),
];
const bare = [
  row({
    id: 'bare-h20-s1',
    target: 'bare',
    batchMax: null,
    groups: ['speed'],
    holdMs: 20,
    segments: 1,
    ordersPerSec: 38,
  }),
  row({
    id: 'bare-h20-s20',
    target: 'bare',
    batchMax: null,
    groups: ['speed'],
    holdMs: 20,
    segments: 20,
    ordersPerSec: 684,
  }),
];
const segmentsTarget = (r: BenchmarkReport) => targets(r).find((t) => t.target.includes('segments >= 19x one lock'))!;

describe('the bare peer with its lock held (bare-held)', () => {
  it('should start the bare peer once at the target hold and load it on one segment and on the speed segments', () => {
    const configs = plan(options).filter((c) => c.target === 'bare');
    expect(configs.map((c) => [c.locking, c.holdMs, c.workers, c.batchMax])).toEqual([
      ['redlock', BARE_HELD_MS, 1, null],
    ]);
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
