// The nemesis end to end, as CI runs it: a short run of the quorum world (PostgreSQL, three Redis
// masters, three service processes in network namespaces) with faults drawn from a fixed seed,
// which must end with no anomaly, the sale sold out, and nothing of its world left behind. And a
// run stopped with Ctrl-C (SIGINT) in the middle of its faults leaves nothing behind either.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { leftInNetwork, pidsLeft, runNemesisCli } from './support';

describe('a short nemesis run', () => {
  it('should play faults of several kinds, find no anomaly, sell out, and leave no process, namespace or bridge behind', async () => {
    const ran = await runNemesisCli(['--seconds', '30', '--seed', '20']);
    const report = ran.report;
    if (!report) throw new Error(`no report: exit ${ran.code}\n${ran.stderr.slice(-4000)}`);
    expect({ code: ran.code, anomalies: report.anomalies.first }).toEqual({ code: 0, anomalies: [] });
    expect(Object.keys(report.faults).length).toBeGreaterThanOrEqual(4);
    expect(report.checks.map((c) => c.anomalies)).toEqual(report.checks.map(() => 0));
    expect(report.operations.order.ok).toBeGreaterThan(20);
    expect(report.liveness.soldOut).toBe(true);
    expect(await pidsLeft(ran.out)).toEqual([]);
    if (report.network) expect(leftInNetwork(report.network)).toEqual([]);
  }, 600_000);

  it('should stop its world at once on Ctrl-C (SIGINT) during the faults', async () => {
    const ran = await runNemesisCli(['--seconds', '60', '--seed', '21'], (line, child) => {
      if (line.includes('playing')) setTimeout(() => child.kill('SIGINT'), 3000);
    });
    expect(ran.code).toBe(130);
    expect(ran.stderr).toContain('SIGINT: stopping the world');
    expect(await pidsLeft(ran.out)).toEqual([]);
    const made = JSON.parse(readFileSync(join(ran.out, 'world', 'network.json'), 'utf8')) as {
      bridge: string;
      namespaces: string[];
    } | null;
    if (made) expect(leftInNetwork(made)).toEqual([]);
  }, 600_000);
});
