// The benchmark's quick path, in-process against the test run's PostgreSQL and Redis: it must
// produce its reports, verify every scenario's invariants, and report finite figures. Speed is
// not asserted: the machine is shared and the numbers are noise at this size.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BenchmarkResult, runBenchmark } from '../bench/benchmark';
import { testUrls } from './support/service';

describe('benchmark (quick path)', () => {
  const outDir = mkdtempSync(join(tmpdir(), 'flashsale-bench-test-'));
  const lines: string[] = [];
  let result: BenchmarkResult;

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
      throw new Error(`runBenchmark failed: ${(err as Error).message}\n--- last progress lines ---\n${lines.slice(-40).join('\n')}`, { cause: err });
    }
  }, 115_000);

  afterAll(() => rmSync(outDir, { recursive: true, force: true }));

  it('should write latest.json, latest.md and latest.svg into the given folder', () => {
    for (const f of ['latest.json', 'latest.md', 'latest.svg']) expect(existsSync(join(outDir, f))).toBe(true);
    const md = readFileSync(join(outDir, 'latest.md'), 'utf8');
    expect(md).toContain('](latest.svg)');
    expect(md).toMatch(/cores/);
    expect(readFileSync(join(outDir, 'latest.svg'), 'utf8')).toMatch(/^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
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
