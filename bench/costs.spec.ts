// The cost readings' parsing and arithmetic, on fixed INFO and /proc texts.
import { CostSnapshot, costDeltas, parseCommandStats, parseRedisCpu, processCpuS, sumRedis } from './costs';

describe('costs', () => {
  it('should read calls per command from INFO commandstats, subcommands included', () => {
    const info = [
      '# Commandstats',
      'cmdstat_evalsha:calls=120,usec=900,usec_per_call=7.50,rejected_calls=0,failed_calls=0',
      'cmdstat_set:calls=40,usec=80,usec_per_call=2.00,rejected_calls=0,failed_calls=0',
      'cmdstat_config|resetstat:calls=1,usec=127,usec_per_call=127.00,rejected_calls=0,failed_calls=0',
    ].join('\r\n');
    expect(parseCommandStats(info)).toEqual({ evalsha: 120, set: 40, 'config|resetstat': 1 });
  });

  it("should add user and system CPU of Redis's INFO cpu", () => {
    expect(
      parseRedisCpu('# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9.0\r\n'),
    ).toBeCloseTo(3.75);
  });

  it('should read utime, stime, cutime and cstime from /proc/<pid>/stat, whatever the command name holds', () => {
    // pid (comm) state ppid ... field 14 utime=250, 15 stime=50, 16 cutime=100, 17 cstime=0 (USER_HZ 100).
    const stat = '4242 (node (worker) x) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 50 100 0 20 0 11 0 12345';
    expect(processCpuS(stat)).toBeCloseTo(4);
  });

  it("should divide the deltas by the units, count scripts as round trips and leave the probe's INFO out", () => {
    const before: CostSnapshot = {
      atMs: 1000,
      redisCalls: { evalsha: 100, exists: 100, info: 10 },
      redisCpuS: 1,
      pgNextXid: 500,
      pgWalBytes: 10_000,
      pgCpuS: 3,
      targetCpuS: 10,
    };
    const after: CostSnapshot = {
      atMs: 4000,
      redisCalls: { evalsha: 300, exists: 300, set: 50, info: 12 },
      redisCpuS: 1.002,
      pgNextXid: 525,
      pgWalBytes: 60_000,
      pgCpuS: 3.5,
      targetCpuS: 11,
    };
    const c = costDeltas(before, after, 'order', 100);
    expect(c).toMatchObject({ unit: 'order', units: 100, windowS: 3 });
    expect(c.totals).toMatchObject({
      redisScripts: 200,
      redisCommands: 450,
      redisByCommand: { evalsha: 200, exists: 200, set: 50 },
      pgWriteTransactions: 25,
      pgWalBytes: 50_000,
    });
    expect(c.perUnit.redisScripts).toBe(2);
    expect(c.perUnit.redisCommands).toBe(4.5);
    expect(c.perUnit.redisCpuUs).toBeCloseTo(20);
    expect(c.perUnit.pgWriteTransactions).toBe(0.25);
    expect(c.perUnit.pgWalBytes).toBe(500);
    expect(c.perUnit.pgCpuUs).toBeCloseTo(5000);
    expect(c.perUnit.targetCpuUs).toBeCloseTo(10_000);
    // PostgreSQL on another host: no CPU figure, the rest as before.
    expect(costDeltas({ ...before, pgCpuS: null }, after, 'order', 100).perUnit.pgCpuUs).toBeNull();
    expect(costDeltas(before, after, 'answer', 0).perUnit.redisScripts).toBe(0);
  });

  it('should sum the calls and CPU of every server of a setup, and keep each server apart', () => {
    const at = (calls: number[], cpu: number[]): CostSnapshot => {
      const servers = calls.map((n, i) => ({
        server: `redis://127.0.0.1:700${i}`,
        redisCalls: { evalsha: n, pexpire: n / 2, info: 5 },
        redisCpuS: cpu[i],
      }));
      return {
        atMs: 0,
        ...sumRedis(servers),
        redisServers: servers,
        pgNextXid: 0,
        pgWalBytes: 0,
        pgCpuS: null,
        targetCpuS: null,
      };
    };
    const before = at([100, 200, 300], [1, 2, 3]);
    expect(before.redisCalls).toEqual({ evalsha: 600, pexpire: 300, info: 15 });
    expect(before.redisCpuS).toBe(6);
    const c = costDeltas(before, at([150, 300, 300], [1.001, 2.002, 3]), 'order', 50);
    // 50 + 100 + 0 scripts, each with half as many PEXPIREs inside; the probe's INFO left out.
    expect(c.totals).toMatchObject({
      redisScripts: 150,
      redisCommands: 225,
      redisByCommand: { evalsha: 150, pexpire: 75 },
    });
    expect(c.perUnit.redisScripts).toBe(3);
    expect(c.perUnit.redisCpuUs).toBeCloseTo(60);
    expect(c.redisServers!.map((x) => x.perUnit.redisScripts)).toEqual([1, 2, 0]);
    expect(c.redisServers!.map((x) => x.server)).toEqual([
      'redis://127.0.0.1:7000',
      'redis://127.0.0.1:7001',
      'redis://127.0.0.1:7002',
    ]);
    expect(c.redisServers![1].perUnit.redisCpuUs).toBeCloseTo(40);
    // One server: the totals are its own, no per-server list.
    expect(costDeltas(at([100], [1]), at([150], [1.001]), 'order', 50).redisServers).toBeUndefined();
  });
});
