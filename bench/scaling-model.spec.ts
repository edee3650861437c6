// The scaling model's arithmetic with fixed inputs worked out by hand, and how it reads a report.
import {
  Capacity,
  DEFAULT_CAPACITY,
  joinPlan,
  loserCost,
  maxBuyersPerS,
  Measured,
  ModelInputError,
  parseModelArgs,
  plan,
  readMeasured,
  render,
  Sale,
  VARIANTS,
} from './scaling-model';
import { BenchmarkReport, ScenarioResult } from './types';
import type { QueueReport } from './waiting-room';

const measured: Measured = {
  order: {
    serviceCpuUs: 500,
    productSlotCalls: 1,
    spreadCalls: 2,
    redisCpuPerCallUs: 10,
    pgPrimaryCpuUs: 300,
    pgWriteTransactions: 0.25,
    walBytes: 500,
  },
  refusal: {
    serviceCpuUs: 400,
    productSlotCalls: 1,
    spreadCalls: 0,
    redisCpuPerCallUs: 10,
    pgPrimaryCpuUs: 200,
    pgWriteTransactions: 0,
    walBytes: 0,
  },
  floorCpuUs: 100,
  segmentOrdersPerS: 1000,
  refusalsPerSProcess: 2000,
  retryDelayMs: 8,
  inputs: [],
};
const sale: Sale = { buyers: 100_000, units: 1000, seconds: 1, requestsPerBuyer: 1, segments: 10 };
const cap: Capacity = {
  processUtil: 0.5,
  redisUtil: 0.5,
  pgCores: 10,
  pgUtil: 0.5,
  pgCommitsPerS: 100_000,
  walMBps: 1000,
  admitFactor: 2,
};
const variant = (name: string) => VARIANTS.find((v) => v.name === name)!;

describe('scaling model', () => {
  it('should sell at the slowest of arrivals, segments, commits and WAL, and split the requests into orders, losers and refusals', () => {
    const p = plan(measured, sale, cap, variant('as built'));
    // 10 segments x 1000/s is below 100,000 arrivals/s, 100,000 / 0.25 commits and 1000 MB/s / 500 B.
    expect(p).toMatchObject({
      arrivalPerS: 100_000,
      sellPerS: 10_000,
      sellLimitedBy: 'segment locks',
      losers: 9000,
      refusals: 90_000,
    });
    expect(p.sellOutS).toBeCloseTo(0.1);
    // Arrivals limit when they are the slowest; commits when ORDER_BATCH_MAX=1 costs a commit per order.
    expect(plan(measured, { ...sale, buyers: 5000 }, cap, variant('as built'))).toMatchObject({
      sellPerS: 5000,
      sellLimitedBy: 'arrivals',
      losers: 0,
    });
    const onePerCommit = { ...measured, order: { ...measured.order, pgWriteTransactions: 1 } };
    expect(plan(onePerCommit, sale, { ...cap, pgCommitsPerS: 4000 }, variant('as built'))).toMatchObject({
      sellPerS: 4000,
      sellLimitedBy: 'PostgreSQL commits/s',
    });
  });

  it('should cost a loser as an order without the write, with two reads and its lock polls while it waits', () => {
    const l = loserCost(measured, 0.05);
    // 0.05 s / 8 ms = 6.25 attempts, two round trips each.
    expect(l).toMatchObject({
      serviceCpuUs: 500,
      productSlotCalls: 1,
      spreadCalls: 2 + 12.5,
      pgPrimaryCpuUs: 400,
      pgWriteTransactions: 0,
      walBytes: 0,
    });
  });

  it('should total the resources over the window and name the first limit', () => {
    const p = plan(measured, sale, cap, variant('as built'));
    // Service: 1000 x 500 + 9000 x 500 + 90,000 x 400 µs = 41 core-seconds in 1 s, at half a core each.
    expect(p.serviceCores).toBeCloseTo(41);
    expect(p.processes).toBe(82);
    // Refusals at the 100 µs floor instead: 41 - 90,000 x 300 µs = 14 cores.
    expect(p.processesAtFloor).toBe(28);
    // Every request calls the product's slot once, 10 µs each: 1 core of one master.
    expect(p.productSlotCores).toBeCloseTo(1);
    // Orders 2 calls, losers 14.5: (1000 x 2 + 9000 x 14.5) x 10 µs = 1.325 cores, masters at half a core.
    expect(p.spreadMasters).toBe(3);
    // 1000 x 300 + 9000 x 400 + 90,000 x 200 µs.
    expect(p.pgPrimaryCores).toBeCloseTo(21.9);
    expect(p.commits).toBeCloseTo(250);
    expect(p.commitsPerS).toBeCloseTo(2500);
    expect(p.walMB).toBeCloseTo(0.5);
    expect(p.walMBps).toBeCloseTo(5);
    expect(p.utilisation['product slot (one Redis master)']).toBeCloseTo(2);
    expect(p.utilisation['PostgreSQL primary CPU']).toBeCloseTo(21.9 / 5);
    expect(p.utilisation['PostgreSQL commits/s']).toBeCloseTo(0.025);
    expect(p.utilisation['WAL MB/s']).toBeCloseTo(0.005);
    expect(p.firstLimit).toBe('PostgreSQL primary CPU');
  });

  it('should spread the work over the sell-out when it outlasts the arrivals, every buyer then a loser', () => {
    // 2000 units on one segment of 1000/s: sold out after 2 s; all 100,000 arrive within 1 s.
    const p = plan(measured, { ...sale, units: 2000, segments: 1 }, cap, variant('as built'));
    expect(p).toMatchObject({ sellPerS: 1000, losers: 98_000, refusals: 0 });
    expect(p.sellOutS).toBeCloseTo(2);
    // (2000 + 98,000) x 500 µs over 2 s.
    expect(p.serviceCores).toBeCloseTo(25);
    // A loser waits 2 - 0.5 s on average: 187.5 attempts, 375 round trips beside the order's 2.
    expect(p.spreadMasters).toBe(Math.ceil(((2000 * 2 + 98_000 * 377) * 10) / 1e6 / 2 / 0.5));
  });

  it('should find the most buyers per second that fit, and no bound when no wall grows with them', () => {
    const b = maxBuyersPerS(measured, sale, cap, variant('as built'));
    const at = (buyers: number) =>
      plan(measured, { ...sale, buyers }, cap, variant('as built')).utilisation['PostgreSQL primary CPU'];
    expect(at(b)).toBeLessThan(1);
    expect(at(b + 2)).toBeGreaterThanOrEqual(1);
    expect(b).toBeLessThan(100_000);
    // Behind the queue the losers are capped: more buyers fit, and none bound it once a refusal costs
    // neither the product's slot nor the primary (what the door measures).
    expect(maxBuyersPerS(measured, sale, cap, variant('+ queue'))).toBeGreaterThan(b);
    const door = { ...measured, refusal: { ...measured.refusal, productSlotCalls: 0, pgPrimaryCpuUs: 0 } };
    expect(maxBuyersPerS(door, sale, cap, variant('+ queue'))).toBe(Infinity);
    expect(maxBuyersPerS(door, sale, cap, variant('as built'))).toBeLessThan(Infinity);
  });

  it('should let at most admitFactor - 1 times the units through the queue as losers, the rest refused', () => {
    const q = plan(measured, sale, cap, variant('+ queue'));
    expect(q).toMatchObject({ losers: 1000, refusals: 98_000 });
    // 1000 x 300 + 1000 x 400 + 98,000 x 200 µs.
    expect(q.pgPrimaryCores).toBeCloseTo(20.3);
    // Every request still calls the product's slot once: 100,000 x 10 µs.
    expect(q.productSlotCores).toBeCloseTo(1);
    expect(q.serviceCores).toBeCloseTo(40.2);
    // Orders 2 calls, the 1000 losers 14.5 each (refusals none), masters at half a core.
    expect(q.spreadMasters).toBe(Math.ceil((1000 * 2 * 10 + 1000 * 14.5 * 10) / 1e6 / 0.5));
  });

  const costs = (perUnit: Partial<NonNullable<ScenarioResult['costs']>['perUnit']>) => ({
    unit: 'order' as const,
    units: 1000,
    windowS: 1,
    totals: {} as never,
    perUnit: {
      redisScripts: 2,
      redisCommands: 8,
      redisCpuUs: 20,
      pgWriteTransactions: 0.25,
      pgWalBytes: 500,
      pgCpuUs: 300,
      targetCpuUs: 500,
      ...perUnit,
    },
  });
  const scenario = (s: Partial<ScenarioResult>) =>
    ({
      kind: 'steady',
      target: 'service',
      locking: 'redlock',
      workers: 1,
      batchMax: null,
      holdMs: 0,
      segments: 20,
      status: 'ok',
      ordersPerSec: 1000,
      ...s,
    }) as ScenarioResult;
  const report = (scenarios: ScenarioResult[]) =>
    ({
      startedAt: '2026-11-22T00:00:00Z',
      machine: { cores: 2, cpuModel: 'test' },
      settings: {
        speedWorkers: 1,
        speedSegments: 20,
        batchMax: null,
        quick: true,
        lock: { retryDelayMs: 4, retryJitterMs: 8 },
      },
      scenarios,
    }) as unknown as BenchmarkReport;
  const complete = [
    scenario({ id: 'redlock-w1-h0-s20', costs: costs({}) }),
    scenario({ id: 'redlock-w1-h0-s1', segments: 1, ordersPerSec: 1500, costs: costs({}) }),
    scenario({ id: 'redlock-w1-b1-h0-s20', batchMax: 1, costs: costs({ redisScripts: 4, pgWriteTransactions: 1 }) }),
    scenario({ id: 'redlock-w1-b1-h0-s1', batchMax: 1, segments: 1, ordersPerSec: 150, costs: costs({}) }),
    scenario({
      id: 'soldout-redlock-w1-h0-s20',
      kind: 'soldout',
      ordersPerSec: 3000,
      costs: costs({ redisScripts: 1, redisCpuUs: 12, pgWriteTransactions: 0, pgCpuUs: 200 }),
    }),
    scenario({
      id: 'health-live-w1',
      kind: 'health',
      batchMax: 1,
      segments: 0,
      costs: costs({ redisScripts: 0, targetCpuUs: 90 }),
    }),
  ];

  it('should read the measured costs: the gate on the product slot, the rest spread, one more call per order on a cluster', () => {
    const m = readMeasured(report(complete), 'group', true);
    expect(m.order).toMatchObject({
      serviceCpuUs: 500,
      productSlotCalls: 1,
      spreadCalls: 2,
      redisCpuPerCallUs: 10,
      pgWriteTransactions: 0.25,
    });
    expect(m.refusal).toMatchObject({
      serviceCpuUs: 500,
      productSlotCalls: 1,
      spreadCalls: 0,
      redisCpuPerCallUs: 12,
      pgPrimaryCpuUs: 200,
    });
    expect(m).toMatchObject({ floorCpuUs: 90, segmentOrdersPerS: 1500, refusalsPerSProcess: 3000, retryDelayMs: 8 });
    expect(readMeasured(report(complete), 'one', false).order).toMatchObject({
      spreadCalls: 3,
      pgWriteTransactions: 1,
    });
    expect(readMeasured(report(complete), 'one', false).segmentOrdersPerS).toBe(150);
    // Every input says where it comes from.
    for (const [, i] of m.inputs) expect(['measured', 'derived', 'extrapolated', 'assumed']).toContain(i.source);
    expect(m.inputs.find(([name]) => name === 'refusal: service CPU')![1]).toMatchObject({
      source: 'measured',
      basis: 'soldout-redlock-w1-h0-s20',
    });
  });

  it('should refuse a report without the scenarios or the costs it needs, naming them', () => {
    expect(() => readMeasured(report(complete.filter((s) => s.kind !== 'soldout')), 'group', true)).toThrow(
      /sold-out product \(no --no-sold-out\)/,
    );
    expect(() =>
      readMeasured(
        report(complete.map((s) => ({ ...s, costs: undefined }) as unknown as ScenarioResult)),
        'group',
        true,
      ),
    ).toThrow(/no cost figures/);
    const failed = complete.map((s) => (s.kind === 'health' ? { ...s, status: 'FAILED' as const } : s));
    expect(() => readMeasured(report(failed), 'group', true)).toThrow(/GET \/health\/live/);
  });

  it('should print every input with its source, the variants and the first limit, marking a quick run provisional', () => {
    const text = render(report(complete), { ...parseModelArgs([], '/repo'), results: 'r.json' });
    expect(text).toContain('--quick run (PROVISIONAL)');
    expect(text).toMatch(/order: service CPU +500 +µs +measured +redlock-w1-h0-s20/);
    expect(text).toMatch(/pgCommitsPerS +20,000 +commits\/s +assumed/);
    for (const v of VARIANTS) expect(text).toContain(v.name);
    expect(text).toContain('FIRST LIMIT');
  });

  it('should parse its flags with defaults and refuse bad values', () => {
    const o = parseModelArgs([], '/repo');
    expect(o).toMatchObject({
      results: '/repo/bench/results/latest.json',
      batch: 'group',
      cluster: true,
      segmentList: [1, 20, 100, 500],
    });
    expect(o.sale).toEqual({ buyers: 1_000_000, units: 10_000, seconds: 1, requestsPerBuyer: 1, segments: 20 });
    expect(
      parseModelArgs(['--buyers', '50000', '--batch', 'one', '--single-redis', '--pg-cores', '32'], '/repo'),
    ).toMatchObject({
      sale: { buyers: 50_000 },
      batch: 'one',
      cluster: false,
      capacity: { pgCores: 32 },
    });
    expect(() => parseModelArgs(['--buyers', 'many'])).toThrow(/--buyers/);
    expect(() => parseModelArgs(['--process-util', '2'])).toThrow(/--process-util: expected a number from 0.01 to 1/);
    expect(() => parseModelArgs(['--batch', 'big'])).toThrow(/--batch/);
    expect(() => parseModelArgs(['--nope'])).toThrow(ModelInputError);
  });
});

describe('the waiting room in the scaling model', () => {
  const queue = {
    withRoom: { serviceCpuUsPerJoin: 70, redisCommandsPerJoin: 0, redisCpuUsPerJoin: 0 },
    capacity: {
      join: { perS: 9000, cpuUs: 50, redisCommands: 0 },
      poll: { perS: 20_000, cpuUs: 30, redisCommands: 0 },
    },
    intake: {
      counterRow: {
        runs: [
          { writers: 1, joinsPerS: 90_000 },
          { writers: 2, joinsPerS: 80_000 },
        ],
      },
      buckets: { pgCpuUsPerJoin: 14, walBytesPerJoin: 300, sealUsPerJoin: 0.1, drawUsPerTicket: 1 },
    },
  } as unknown as QueueReport;
  const o = {
    sale: { buyers: 1_000_000, units: 10_000, seconds: 1, requestsPerBuyer: 1, segments: 20 },
    capacity: { ...DEFAULT_CAPACITY, processUtil: 0.5, redisUtil: 0.5 },
  };

  it('turns the measured per-join costs into service cores, PostgreSQL hosts and the first limit, which adding hosts moves', () => {
    expect(joinPlan(queue, o)).toEqual({
      joinsPerS: 1_000_000,
      serviceCores: 100,
      pollsPerS: 200_000,
      pollCores: 12,
      drawCores: 2,
      processes: 114,
      redisCommandsPerS: 0,
      pgCores: 14,
      walMBps: 300,
      sealShare: 0.1,
      orderReadsMBps: 912,
      // WAL: 300 of 100 MB/s at one host; CPU: 14 of 16 x 0.7 cores.
      hosts: 3,
      counterRowCeilingPerS: 90_000,
      fits: false,
      firstLimit: "one PostgreSQL host's WAL (3.00 of it at one host: 3 hosts)",
    });
    // At 70 % per process the same crowd fits on 100 cores.
    expect(joinPlan(queue, { ...o, capacity: { ...o.capacity, processUtil: 0.9 } })).toMatchObject({ fits: true });
    // A small crowd fits one host.
    expect(joinPlan(queue, { ...o, sale: { ...o.sale, buyers: 20_000 } })).toMatchObject({ hosts: 1 });
  });

  it('plans service cores alone from a report written before the intake was measured', () => {
    const older = { ...queue, capacity: undefined, intake: undefined } as unknown as QueueReport;
    expect(joinPlan(older, o)).toMatchObject({
      serviceCores: 140,
      pollCores: null,
      hosts: null,
      firstLimit: 'service cores',
    });
  });
});
