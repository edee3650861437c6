// The waiting room's benchmark (bench/waiting-room.ts) on its quick path: its own PostgreSQL,
// Redis and service start, a small crowd with and without a waiting room. It must verify both
// sales and report finite figures; speed is not asserted.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QueueReport, runQueueBenchmark } from '../waiting-room';

describe('the waiting-room benchmark (small crowd)', () => {
  const outDir = mkdtempSync(join(tmpdir(), 'flashsale-bench-queue-'));
  const lines: string[] = [];
  let report: QueueReport;

  beforeAll(async () => {
    try {
      report = await runQueueBenchmark({
        buyers: 800,
        units: 60,
        connections: 32,
        pollersInFlight: 32,
        workers: 2,
        admissionTtlS: 10,
        powJoins: 100,
        windowS: 1,
        cancelAfterS: 1,
        outDir,
        log: (line) => lines.push(line),
      });
    } catch (err) {
      throw new Error(`runQueueBenchmark failed: ${(err as Error).message}\n${lines.slice(-30).join('\n')}`, {
        cause: err,
      });
    }
  }, 300_000);
  afterAll(() => rmSync(outDir, { recursive: true, force: true }));

  it('verifies both sales: sold out, I1, every order admitted, admissions in queue order, the lottery recomputed', () => {
    const failed = [...report.withRoom.checks, ...report.withoutRoom.checks, ...report.estimate.sale.checks].filter(
      (c) => !c.ok,
    );
    expect(failed).toEqual([]);
    expect(report.withRoom.fairnessShare).toBe(1);
    expect(report.withRoom.preQueue).toBeGreaterThan(0);
    expect(readdirSync(outDir).sort()).toEqual(['queue.json', 'queue.md']);
  });

  it('reports finite rates and costs for both', () => {
    const w = report.withRoom;
    const measures = [w.joinsPerS, w.pollsPerS, w.startToSoldOutS, w.startToAllPaidS, w.redisCommandsPerTicket];
    for (const n of [...measures, w.pgTransactionsPerBuyer]) expect(Number.isFinite(n)).toBe(true);
    const x = report.withoutRoom;
    for (const n of [x.ordersPerS, x.startToSoldOutS, x.pgTransactionsPerBuyer]) expect(Number.isFinite(n)).toBe(true);
    expect(Number.isFinite(report.healthLivePerS)).toBe(true);
  });

  it('checks first estimates of the wait against admissions made in steps, in a sale where every second order is cancelled', () => {
    expect(report.estimate.sale.etaSamples).toBeGreaterThan(0);
    expect(Number.isFinite(report.estimate.sale.etaErrorShare.p90)).toBe(true);
  });

  it('joins with solved challenges as readily as without: none refused, both rates finite', () => {
    const p = report.proofOfWork;
    expect(p.refused).toBe(0);
    expect(Number.isFinite(p.onPerS) && Number.isFinite(p.offPerS)).toBe(true);
  });
});
