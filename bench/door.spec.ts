// The door benchmark's arithmetic: rows measured in parts are merged by answers and time, and the
// targets are ratios of rows of the same run.
import type { ScenarioCosts } from './costs';
import { DoorRow, doorTargets, merge } from './door';

function row(
  id: string,
  okStatus: number,
  ok: number,
  elapsedS: number,
  perUnit: Partial<ScenarioCosts['perUnit']> = {},
): DoorRow {
  return {
    id,
    start: 'plain',
    what: id,
    okStatus,
    answers: ok,
    elapsedS,
    perSec: ok / elapsedS,
    statusCounts: { [String(okStatus)]: ok },
    latencyMs: { p50: 10, p99: 20, max: 30, mean: 11 },
    costs: {
      unit: 'answer',
      units: ok,
      windowS: elapsedS,
      totals: {} as ScenarioCosts['totals'],
      perUnit: {
        redisScripts: 0,
        redisCommands: 0,
        redisCpuUs: 0,
        pgWriteTransactions: 0,
        pgStatements: 0,
        pgWalBytes: 0,
        pgCpuUs: 0,
        targetCpuUs: 100,
        ...perUnit,
      },
    },
  };
}

describe('merge', () => {
  it('should add answers and time, and weigh costs per answer by answers', () => {
    const m = merge([
      row('r', 410, 1000, 1, { pgStatements: 0.01, targetCpuUs: 100 }),
      row('r', 410, 3000, 2, { pgStatements: 0.002, targetCpuUs: 200 }),
    ]);
    expect(m.answers).toBe(4000);
    expect(m.elapsedS).toBe(3);
    expect(m.perSec).toBeCloseTo(4000 / 3);
    expect(m.costs.perUnit.pgStatements).toBeCloseTo((0.01 * 1000 + 0.002 * 3000) / 4000);
    expect(m.costs.perUnit.targetCpuUs).toBeCloseTo(175);
    expect(m.statusCounts).toEqual({ '410': 4000 });
  });

  it('should keep the worst p99 of the parts', () => {
    const a = row('r', 200, 10, 1);
    const b = { ...row('r', 200, 10, 1), latencyMs: { p50: 30, p99: 90, max: 100, mean: 31 } };
    expect(merge([a, b]).latencyMs).toEqual({ p50: 20, p99: 90, max: 100, mean: 21 });
  });
});

describe('doorTargets', () => {
  const rows = [
    row('health-live-plain', 200, 10_000, 1, { targetCpuUs: 100 }),
    row('sold-out-410', 410, 8_000, 1, { targetCpuUs: 125, pgStatements: 0.004, redisCommands: 0 }),
    row('already-ordered-409', 409, 4_000, 1, { targetCpuUs: 150, pgStatements: 0.02, redisCommands: 0 }),
    row('orders-plain', 201, 2_000, 1),
    row('orders-hs256', 201, 1_700, 1),
    row('health-live-limited', 200, 10_000, 1, { targetCpuUs: 100 }),
    row('rate-limited-429', 429, 7_500, 1, { targetCpuUs: 140 }),
  ];
  const byName = new Map(doorTargets(rows).map((t) => [t.name, t]));

  it('should compare refusals and 429s with the floor of the same start', () => {
    expect(byName.get('410 to distinct buyers / GET /health/live (same process)')).toMatchObject({
      measured: 0.8,
      ok: true,
    });
    expect(byName.get('409 to holders asking again / GET /health/live (same process)')).toMatchObject({
      measured: 0.4,
      ok: false,
    });
    expect(byName.get('429 / GET /health/live (same process)')).toMatchObject({ measured: 0.75, ok: true });
    expect(byName.get('service CPU per GET /health/live / per 429 (same process)')!.measured).toBeCloseTo(100 / 140);
  });

  it('should hold statements and commands per refusal to at most the target', () => {
    expect(byName.get('PostgreSQL statements per 410')).toMatchObject({ measured: 0.004, ok: true });
    expect(byName.get('PostgreSQL statements per 409')).toMatchObject({ measured: 0.02, ok: false });
  });

  it('should compare orders with identity on against off', () => {
    expect(byName.get('orders/s with HS256 identity / without')).toMatchObject({ measured: 0.85, ok: false });
  });
});
