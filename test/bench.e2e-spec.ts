// The benchmark's quick path, in-process against the test run's PostgreSQL and Redis: it must
// produce its reports, verify every scenario's invariants, and report finite figures. Speed is
// not asserted: the machine is shared and the numbers are noise at this size.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BenchmarkResult, runBenchmark } from '../bench/benchmark';
import { testUrls } from './support/service';

describe('benchmark (quick path)', () => {
  const outDir = mkdtempSync(join(tmpdir(), 'flashsale-bench-test-'));
  const lines: string[] = [];
  let result: BenchmarkResult;

  // 12 scenarios and 4 service starts take about 100 s on a busy 2-core machine: the hook's bound
  // is there to catch a hang, not to judge speed.
  beforeAll(async () => {
    const { databaseUrl, redisUrl } = testUrls();
    try {
      result = await runBenchmark({
        quick: true,
        duration: 2,
        connections: 20,
        workers: 2,
        warmUp: 0.5,
        databaseUrl,
        redisUrl,
        outDir,
        log: (line) => lines.push(line),
      });
    } catch (err) {
      throw new Error(`runBenchmark failed: ${(err as Error).message}\n--- last progress lines ---\n${lines.slice(-40).join('\n')}`);
    }
  }, 300_000);

  afterAll(() => rmSync(outDir, { recursive: true, force: true }));

  it('should write latest.json and latest.md, with a Mermaid chart of the sweep per locking mode', () => {
    expect(readdirSync(outDir).sort()).toEqual(['latest.json', 'latest.md']);
    const md = readFileSync(join(outDir, 'latest.md'), 'utf8');
    expect(md).toMatch(/cores/);
    const charts = [...md.matchAll(/```mermaid\n([\s\S]*?)```/g)].map((m) => m[1]);
    expect(charts).toHaveLength(2);
    const sweep = result.report.settings.sweep!;
    for (const [i, mode] of (['redlock', 'database'] as const).entries()) {
      expect(charts[i]).toContain('xychart-beta');
      expect(charts[i]).toContain(`x-axis "segments" [${sweep.join(', ')}]`);
      const bars = charts[i].match(/bar "measured" \[([^\]]*)\]/)![1].split(', ').map(Number);
      const measured = sweep.map((n) => result.report.scenarios.find((s) => s.kind === 'steady' && s.locking === mode && s.holdMs === result.report.settings.sweepHold && s.segments === n)!.ordersPerSec);
      expect(bars).toHaveLength(sweep.length);
      // The chart rounds as the tables do: whole numbers from 100 up, one decimal below.
      bars.forEach((b, j) => expect(Math.abs(b - measured[j])).toBeLessThanOrEqual(measured[j] >= 100 ? 0.5 : 0.05));
    }
    const json = JSON.parse(readFileSync(join(outDir, 'latest.json'), 'utf8'));
    expect(json.scenarios).toHaveLength(result.report.scenarios.length);
  });

  it('should run the single lock, the segmented layout, the sweep, the no-lock peer and the sale', () => {
    const ids = result.report.scenarios.map((s) => s.id);
    for (const id of ['redlock-h0-s1', 'redlock-h0-s20', 'redlock-h20-s1', 'redlock-h20-s5', 'redlock-h20-s20', 'database-h20-s20', 'sale-redlock-h20-s20', 'sale-redlock-h20-s1']) {
      expect(ids).toContain(id);
    }
  });

  it('should verify every scenario from PostgreSQL', () => {
    for (const s of result.report.scenarios) {
      const broken = s.verification.checks.filter((c) => !c.ok).map((c) => `${c.name}: ${c.detail}`);
      expect({ id: s.id, verified: s.verification.verified, broken }).toEqual({ id: s.id, verified: true, broken: [] });
      expect(s.status).toBe('ok');
      expect(s.verification.audit.ordered + s.verification.audit.remaining).toBe(s.verification.audit.totalStock);
    }
    for (const sale of result.report.scenarios.filter((s) => s.kind === 'sale')) {
      expect(sale.verification.audit.orders).toBe(sale.stock);
      expect(sale.statusCounts['201']).toBe(sale.stock);
      expect((sale.statusCounts['201'] ?? 0) + (sale.statusCounts['410'] ?? 0)).toBe(sale.buyers);
    }
  });

  it('should report finite figures', () => {
    for (const s of result.report.scenarios) {
      expect(s.created).toBeGreaterThan(0);
      for (const v of [s.ordersPerSec, s.elapsedS, s.latency201Ms!.p50, s.latency201Ms!.p99, s.latency201Ms!.max]) {
        expect(Number.isFinite(v)).toBe(true);
        expect(v).toBeGreaterThan(0);
      }
      if (s.kind === 'sale') expect(Number.isFinite(s.sellOutMs)).toBe(true);
    }
    for (const svc of result.report.services) {
      expect(svc.processes.length).toBeGreaterThanOrEqual(1);
      for (const p of svc.processes) expect(Number.isFinite(p.peakRssMb) && p.peakRssMb > 0).toBe(true);
    }
    expect(result.report.machine.cores).toBeGreaterThan(0);
    expect(result.report.machine.postgres).toMatch(/PostgreSQL/);
    expect(result.report.machine.redis).toMatch(/^\d+\./);
  });
});
