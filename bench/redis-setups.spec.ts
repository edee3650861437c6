// The Redis setups group: its plan (which scenarios, which service starts, stable ids) and its
// report (the rows, the ratios to the one redis-server, per-server calls, the command line), on a
// fixed report; the group's real run is covered by bench/test/bench.e2e-spec.ts.
import { ScenarioCosts } from './costs';
import { planOptions, reportOf, scenarioRow } from './fixtures';
import { findFast, redisSetupsSection, renderMarkdown } from './report';
import { plan } from './scenarios';
import { ScenarioResult } from './types';

const options = planOptions;

describe('Redis setups: the plan', () => {
  it('should add the speed load on a quorum and on a cluster, each its own start, after every other start; the one redis-server shares the existing rows', () => {
    const without = plan({ ...options, redisSetups: false });
    const configs = plan(options);
    const ids = (cs: typeof configs) => cs.flatMap((c) => c.scenarios.map((s) => s.id));
    // Every id of a run without the group is still there, unchanged, and nothing of the group is in it.
    expect(ids(configs)).toEqual(expect.arrayContaining(ids(without)));
    expect(ids(without).filter((id) => /-r[qc]$/.test(id))).toEqual([]);
    expect(without.every((c) => c.redis === 'single')).toBe(true);
    // Four starts more, the last four: group commit and ORDER_BATCH_MAX=1 on each of the two setups.
    expect(configs).toHaveLength(without.length + 4);
    const added = configs.slice(without.length);
    expect(added.map((c) => [c.redis, c.batchMax, c.workers, c.holdMs, c.locking, c.target])).toEqual([
      ['quorum', null, 1, 0, 'redlock', 'service'],
      ['quorum', 1, 1, 0, 'redlock', 'service'],
      ['cluster', null, 1, 0, 'redlock', 'service'],
      ['cluster', 1, 1, 0, 'redlock', 'service'],
    ]);
    expect(added.map((c) => c.scenarios.map((s) => s.id))).toEqual([
      ['redlock-w1-h0-s20-rq'],
      ['redlock-w1-b1-h0-s20-rq'],
      ['redlock-w1-h0-s20-rc'],
      ['redlock-w1-b1-h0-s20-rc'],
    ]);
    for (const c of added)
      expect(c.scenarios[0]).toMatchObject({
        kind: 'steady',
        segments: 20,
        stock: 1_000_000,
        groups: ['redis-setups'],
        redis: c.redis,
      });
    // The one redis-server's rows are the speed and group-commit scenarios, measured once.
    const all = configs.flatMap((c) => c.scenarios);
    for (const id of ['redlock-w1-h0-s20', 'redlock-w1-b1-h0-s20']) {
      const s = all.find((x) => x.id === id)!;
      expect(s.groups).toEqual(expect.arrayContaining(['speed', 'batch', 'redis-setups']));
      expect(s.redis).toBeUndefined();
    }
  });

  it('should start the one redis-server rows itself when neither the peers nor group commit run', () => {
    const configs = plan({ ...options, peers: [], batch: false, soldOut: false, holds: [20] });
    const group = configs.flatMap((c) =>
      c.scenarios.filter((s) => s.groups.includes('redis-setups')).map((s) => [s.id, c.redis]),
    );
    expect(group).toEqual([
      ['redlock-w1-h0-s20', 'single'],
      ['redlock-w1-b1-h0-s20', 'single'],
      ['redlock-w1-h0-s20-rq', 'quorum'],
      ['redlock-w1-b1-h0-s20-rq', 'quorum'],
      ['redlock-w1-h0-s20-rc', 'cluster'],
      ['redlock-w1-b1-h0-s20-rc', 'cluster'],
    ]);
  });
});

describe('Redis setups: the report', () => {
  const costs = (scripts: number, cpuUs: number, servers?: number[]): ScenarioCosts =>
    ({
      unit: 'order',
      units: 1000,
      windowS: 3,
      totals: {},
      perUnit: {
        redisScripts: scripts,
        redisCommands: scripts * 2,
        redisCpuUs: cpuUs,
        pgWriteTransactions: 0.1,
        pgWalBytes: 300,
        pgCpuUs: 200,
        targetCpuUs: 400,
      },
      ...(servers
        ? {
            redisServers: servers.map((n, i) => ({
              server: `redis://127.0.0.1:${7000 + i}`,
              totals: {},
              perUnit: { redisScripts: n, redisCommands: n * 2, redisCpuUs: cpuUs / servers.length },
            })),
          }
        : {}),
    }) as unknown as ScenarioCosts;
  const row = (s: Partial<ScenarioResult>): ScenarioResult => scenarioRow({ groups: ['redis-setups'], ...s });
  const report = reportOf(options, 'node dist/bench/run.js --quick --no-sweep', [
    row({
      id: 'redlock-w1-h0-s20',
      groups: ['speed', 'batch', 'redis-setups'],
      ordersPerSec: 1000,
      costs: costs(2, 20),
    }),
    row({
      id: 'redlock-w1-b1-h0-s20',
      batchMax: 1,
      groups: ['speed', 'batch', 'redis-setups'],
      ordersPerSec: 800,
      costs: costs(4, 40),
    }),
    row({
      id: 'redlock-w1-h0-s20-rq',
      redis: 'quorum',
      ordersPerSec: 500,
      latency201Ms: { mean: 20, p50: 20, p99: 80, max: 90 },
      costs: costs(6, 60, [3, 1.5, 1.5]),
    }),
    row({
      id: 'redlock-w1-b1-h0-s20-rq',
      redis: 'quorum',
      batchMax: 1,
      ordersPerSec: 400,
      costs: costs(12, 100, [6, 3, 3]),
    }),
    row({ id: 'redlock-w1-h0-s20-rc', redis: 'cluster', ordersPerSec: 900, costs: costs(3, 30, [1.25, 0.75, 1]) }),
    row({
      id: 'redlock-w1-b1-h0-s20-rc',
      redis: 'cluster',
      batchMax: 1,
      ordersPerSec: 700,
      status: 'FAILED',
      costs: costs(5, 50, [2, 1.5, 1.5]),
    }),
  ]);

  it('should give a row per setup and ORDER_BATCH_MAX, group commit first, with ratios to the one redis-server at the same ORDER_BATCH_MAX', () => {
    const x = redisSetupsSection(report)!;
    expect(x).toMatchObject({ command: report.command, workers: 1, segments: 20, holdMs: 0 });
    expect(x.rows.map((r) => [r.setup, r.batchMax, r.id])).toEqual([
      ['single', null, 'redlock-w1-h0-s20'],
      ['quorum', null, 'redlock-w1-h0-s20-rq'],
      ['cluster', null, 'redlock-w1-h0-s20-rc'],
      ['single', 1, 'redlock-w1-b1-h0-s20'],
      ['quorum', 1, 'redlock-w1-b1-h0-s20-rq'],
      ['cluster', 1, 'redlock-w1-b1-h0-s20-rc'],
    ]);
    const quorum = x.rows[1];
    expect(quorum.perOrder).toEqual({ redisScripts: 6, redisCommands: 12, redisCpuUs: 60 });
    expect(quorum.vsSingle).toEqual({ ordersPerSec: 0.5, p99: 2, redisScripts: 3, redisCommands: 3, redisCpuUs: 3 });
    expect(quorum.perServer!.map((s) => s.redisScripts)).toEqual([3, 1.5, 1.5]);
    expect(x.rows[0].vsSingle.ordersPerSec).toBe(1);
    expect(x.rows[0].perServer).toBeNull();
    expect(x.rows[5]).toMatchObject({ status: 'FAILED', vsSingle: { ordersPerSec: 0.875, redisScripts: 1.25 } });
    expect(
      redisSetupsSection({
        ...report,
        scenarios: report.scenarios.filter((s) => !s.id.match(/-r[qc]$/)).map((s) => ({ ...s, groups: ['speed'] })),
      }),
    ).toBeNull();
  });

  it('should keep the quorum and cluster rows out of the other sections', () => {
    // findFast feeds the speed table, the targets and the scaling model: the one redis-server only.
    expect(findFast(report, { batchMax: null })!.id).toBe('redlock-w1-h0-s20');
    expect(findFast(report, { batchMax: 1 })!.id).toBe('redlock-w1-b1-h0-s20');
  });

  it('should write the section into latest.md (table, per-server calls, command line) and the console table', () => {
    const md = renderMarkdown(report);
    const start = md.indexOf('## Redis setups (hold 0, 20 segments, WORKERS=1)');
    expect(start).toBeGreaterThan(0);
    const section = md.slice(start, md.indexOf('\n## ', start + 1));
    expect(section).toContain('summed over every server of the setup');
    expect(section).toContain(
      '| Redlock quorum of 3 (`redlock-w1-h0-s20-rq`) | service default | **500** | 0.50x | 80.0 ms | 6.00 | 3.00x | 12.00 | 60.0 | 3.00x | 3.00 / 1.50 / 1.50 | ok |',
    );
    expect(section).toContain('| Redis Cluster, 3 masters (`redlock-w1-b1-h0-s20-rc`) | 1 | **700** | 0.88x |');
    expect(section).toContain('| **FAILED** |');
    expect(section).toContain('Command: `node dist/bench/run.js --quick --no-sweep`');
    // The costs table carries the rows too, summed.
    expect(md).toMatch(/\| redlock-w1-h0-s20-rc \| order \| 1000 \| 400 \| 3\.00 \|/);
    // The cluster's row at the service's default, as the console shows it too (the console prints this report).
    expect(section).toContain(
      '| Redis Cluster, 3 masters (`redlock-w1-h0-s20-rc`) | service default | **900** | 0.90x | 40.0 ms | 3.00 | 1.50x | 6.00 | 30.0 | 1.50x | 1.25 / 0.75 / 1.00 | ok |',
    );
  });
});
