// The benchmark's quick path, in-process against a PostgreSQL of its own and the test run's Redis: it must
// produce its reports, verify every scenario's invariants, and report finite figures. Speed is
// not asserted: the machine is shared and the numbers are noise at this size.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BenchmarkResult, runBenchmark } from '../benchmark';
import { targets } from '../report';
import { ScenarioResult } from '../types';
import { resetState } from '../../test/support/database';
import { testUrls } from '../../test/support/service';

const WORKERS = 1;

describe('benchmark (quick path)', () => {
  const outDir = mkdtempSync(join(tmpdir(), 'flashsale-bench-test-'));
  const lines: string[] = [];
  let result: BenchmarkResult;

  const byId = (id: string): ScenarioResult => {
    const s = result.report.scenarios.find((x) => x.id === id);
    if (!s) throw new Error(`no scenario ${id} in ${result.report.scenarios.map((x) => x.id).join(', ')}`);
    return s;
  };

  // 24 scenarios and 12 process starts (the sale with returns has its own, for its short expiry
  // sweep; the sold-out product shares the group-commit start; the Redis setups add two on a
  // Redlock quorum and two on a Redis Cluster): the hook's bound is there to catch a hang, not to
  // judge speed.
  // One peer (bare-lua) and the service at the comparison's WORKERS keep the starts few: the
  // group-commit rows at the service's default then share the comparison's starts. Every start is
  // one process (WORKERS=1): a start of two workers costs three module loads, and the quick path
  // took 84 s instead of 108 s on 2 cores; the benchmark's sums over a service's worker processes
  // are the waiting-room spec's (queue.e2e-spec.ts, WORKERS=2).
  beforeAll(async () => {
    // A PostgreSQL of its own (runBenchmark starts one when given none): the costs read transaction
    // ids and the WAL position, which a server counts for all its databases, and the other jest
    // worker's specs write on the test run's. Nothing of an earlier spec may be left in this worker's Redis.
    await resetState();
    const { redisUrl } = testUrls();
    try {
      result = await runBenchmark({
        quick: true,
        // A fixed number of requests per steady scenario rather than a 1 s window: a machine starved
        // by other work can stretch a scenario, never leave it with nothing measured. 100 keeps the
        // slowest rows (one lock held 20 ms per order: about 45 orders a second) near 2 s.
        requests: 100,
        connections: 20,
        workers: WORKERS,
        speedWorkers: WORKERS,
        peers: ['bare-lua'],
        warmUp: 0.2,
        redisUrl,
        outDir,
        log: (line) => lines.push(line),
      });
    } catch (err) {
      throw new Error(
        `runBenchmark failed: ${(err as Error).message}\n--- last progress lines ---\n${lines.slice(-40).join('\n')}`,
        { cause: err },
      );
    }
  }, 540_000);

  afterAll(() => rmSync(outDir, { recursive: true, force: true }));

  it('should write latest.json and latest.md, with a Mermaid chart of the sweep per locking mode', () => {
    expect(readdirSync(outDir).sort()).toEqual(['latest.json', 'latest.md', 'logs']);
    const md = readFileSync(join(outDir, 'latest.md'), 'utf8');
    expect(md).toMatch(/cores/);
    const charts = [...md.matchAll(/```mermaid\n([\s\S]*?)```/g)].map((m) => m[1]);
    expect(charts).toHaveLength(2);
    const sweep = result.report.settings.sweep!;
    for (const [i, mode] of (['redlock', 'database'] as const).entries()) {
      expect(charts[i]).toContain('xychart-beta');
      expect(charts[i]).toContain(`x-axis "segments" [${sweep.join(', ')}]`);
      const bars = charts[i]
        .match(/bar "measured" \[([^\]]*)\]/)![1]
        .split(', ')
        .map(Number);
      const measured = sweep.map(
        (n) =>
          result.report.scenarios.find(
            (s) =>
              s.groups.includes('sweep') &&
              s.locking === mode &&
              s.holdMs === result.report.settings.sweepHold &&
              s.segments === n,
          )!.ordersPerSec,
      );
      expect(bars).toHaveLength(sweep.length);
      // The chart rounds as the tables do: whole numbers from 100 up, one decimal below.
      bars.forEach((b, j) => expect(Math.abs(b - measured[j])).toBeLessThanOrEqual(measured[j] >= 100 ? 0.5 : 0.05));
    }
    const json = JSON.parse(readFileSync(join(outDir, 'latest.json'), 'utf8'));
    expect(json.scenarios).toHaveLength(result.report.scenarios.length);
  });

  it('should keep what each started process printed, one file per start in start order, headed by its configuration', () => {
    const starts = lines.filter((l) => /^(service:|peer )/.test(l));
    expect(starts).toHaveLength(12);
    const files = readdirSync(join(outDir, 'logs')).sort();
    expect(files).toEqual(starts.map((_, i) => `${String(i + 1).padStart(2, '0')}.log`));
    expect(files.map((f) => readFileSync(join(outDir, 'logs', f), 'utf8').split('\n')[0])).toEqual(starts);
  });

  it('should run the single lock, the segmented layout, the sweep, the no-lock mode, the sale and the sale with returns', () => {
    const ids = result.report.scenarios.map((s) => s.id);
    for (const id of [
      'redlock-h0-s1',
      'redlock-h0-s20',
      'redlock-h20-s1',
      'redlock-h20-s5',
      'redlock-h20-s20',
      'bare-nolock-h20-s20',
      'sale-redlock-h20-s20',
      'sale-redlock-h20-s1',
      'returns-redlock-h20-s20',
    ]) {
      expect(ids).toContain(id);
    }
  });

  it('should run the bare-lua peer, the GET /health/live floor, and ORDER_BATCH_MAX=1 against group commit at both holds', () => {
    expect(byId('bare-lua-h0-s20')).toMatchObject({
      target: 'bare-lua',
      workers: 1,
      batchMax: null,
      groups: ['speed'],
    });
    expect(byId('health-live')).toMatchObject({ kind: 'health', target: 'service' });
    for (const hold of [0, 20]) {
      for (const n of [1, 20]) {
        expect(byId(`redlock-b1-h${hold}-s${n}`)).toMatchObject({
          batchMax: 1,
          workers: WORKERS,
          holdMs: hold,
          segments: n,
        });
        // Group commit at the service's default is the comparison's own scenario, measured once.
        expect(byId(`redlock-h${hold}-s${n}`).groups).toEqual(expect.arrayContaining(['batch', 'compare']));
      }
    }
  });

  it("should compute issue 8's targets from this run's figures", () => {
    const rows = targets(result.report);
    expect(rows.map((t) => t.result).every((r) => ['pass', 'miss', 'not measured'].includes(r))).toBe(true);
    const x = byId('redlock-h0-s20').ordersPerSec / byId('bare-lua-h0-s20').ordersPerSec;
    expect(rows[1]).toMatchObject({
      measured: expect.stringMatching(new RegExp(`^${x.toFixed(2)}x `)),
      result: x >= 0.7 ? 'pass' : 'miss',
    });
    const y = byId('redlock-b1-h20-s20').ordersPerSec / byId('redlock-b1-h20-s1').ordersPerSec;
    expect(rows[3]).toMatchObject({
      measured: expect.stringMatching(new RegExp(`^${y.toFixed(2)}x `)),
      result: y >= 19 ? 'pass' : 'miss',
    });
    // This run has no bare peer: that target says so rather than passing or missing.
    expect(rows[0].result).toBe('not measured');
    expect(rows.slice(4, 6).map((t) => t.result)).toEqual(['pass', 'pass']);
    const md = readFileSync(join(outDir, 'latest.md'), 'utf8');
    expect(md).toContain("## Issue 8's targets, from this run");
    // Beside every hold-20 figure of group commit: the hold is spent once per lock hold.
    const section = md.slice(md.indexOf('## Group commit'), md.indexOf('\n## ', md.indexOf('## Group commit') + 1));
    const holdCells = section
      .split('\n')
      .filter((l) => /^\| \d/.test(l))
      .map((l) => l.split(' | ')[0].slice(2));
    expect(holdCells.sort()).toEqual([
      '0',
      '0',
      '0',
      '0',
      '20 ms, once per lock hold',
      '20 ms, once per lock hold',
      '20 ms, once per lock hold',
      '20 ms, once per lock hold',
    ]);
  });

  it('should verify every scenario: orders from PostgreSQL (the bare-lua peer from Redis too), the floor by its answers', () => {
    for (const s of result.report.scenarios) {
      const broken = s.verification.checks.filter((c) => !c.ok).map((c) => `${c.name}: ${c.detail}`);
      expect({ id: s.id, verified: s.verification.verified, broken }).toEqual({ id: s.id, verified: true, broken: [] });
      expect(s.status).toBe('ok');
      if (s.kind === 'health') {
        expect(s.verification.checks.map((c) => c.name)).toEqual(['every answer 200', 'no errors or timeouts']);
        continue;
      }
      expect(s.verification.audit!.ordered + s.verification.audit!.remaining).toBe(s.verification.audit!.totalStock);
      // The sold-out product's successes are its refusals; its orders were sold before the load.
      expect(s.verification.audit!.orders).toBeGreaterThanOrEqual(s.kind === 'soldout' ? s.stock : s.created);
    }
    expect(byId('bare-lua-h0-s20').verification.checks.map((c) => c.name)).toEqual(
      expect.arrayContaining(['stock_segments untouched', 'every buyer in the Redis buyer set']),
    );
    for (const sale of result.report.scenarios.filter((s) => s.kind === 'sale')) {
      expect(sale.verification.audit!.orders).toBe(sale.stock);
      expect(sale.statusCounts['201']).toBe(sale.stock);
      expect((sale.statusCounts['201'] ?? 0) + (sale.statusCounts['410'] ?? 0)).toBe(sale.buyers);
    }
  });

  it('should run the sale with returns: sold out, 30% back (half cancelled, half expired), all resold, every fate as answered', () => {
    const r = byId('returns-redlock-h20-s20');
    const { settings } = result.report;
    expect(settings.returns).toMatchObject({
      stock: 200,
      segments: 20,
      buyers: 1000,
      share: 0.3,
      cancelShare: 0.5,
      paymentTimeoutS: 10,
      expirySweepMs: 100,
    });
    expect(r).toMatchObject({
      kind: 'returns',
      groups: ['returns'],
      target: 'service',
      workers: WORKERS,
      stock: 200,
      segments: 20,
      buyers: 1000,
      status: 'ok',
    });
    // Its own service start, with the short sweep; every other start keeps the service's default.
    expect(result.report.services.filter((svc) => svc.expirySweepMs === 100)).toHaveLength(1);
    expect(result.report.services.filter((svc) => svc.expirySweepMs !== null)).toHaveLength(1);
    const names = r.verification.checks.map((c) => c.name);
    for (const name of [
      'first sale: sold out exactly',
      'I1 stock conserved',
      'I2 no user with two live orders',
      'no 5xx answers',
      'pays and cancels as planned',
      'statuses as answered',
      'every returned unit resold exactly once',
      'resale sold out',
    ]) {
      expect(names).toContain(name);
    }
    expect(r.verification.checks.filter((c) => !c.ok)).toEqual([]);
    const x = r.returns!;
    expect(x.planned).toEqual({ pay: 140, cancel: 30, expire: 30 });
    expect(x.returnedUnits).toEqual({ cancelled: 30, expired: 30 });
    // Everything sold in the end: 140 paid at once and the 60 returned units paid by new buyers.
    expect(x.statuses).toEqual({ reserved: 0, paid: 200, cancelled: 30, expired: 30 });
    expect(r.verification.audit).toMatchObject({
      totalStock: 200,
      remaining: 0,
      ordered: 200,
      orders: 200,
      duplicateUsers: 0,
    });
    expect(r.statusCounts).toEqual({ '201': 200, '410': 800 });
    expect(x.pays).toMatchObject({ calls: 140, ok: 140 });
    expect(x.cancels).toMatchObject({ calls: 30, ok: 30 });
    expect(x.resale.created).toBe(60);
    expect(x.resale.paysStatusCounts).toEqual({ '200': 60 });
    expect(r.ordersInDb).toBe(260);
    // Finite figures: (a) the first sell-out, (b) the resale, (c) cancels/s and the expiry lag.
    for (const v of [
      r.sellOutMs!,
      r.ordersPerSec,
      x.cancels.perSec,
      x.pays.perSec,
      x.resale.firstReturnToSoldOutMs!,
      x.expiryLagMs!.max,
      x.resale.onSaleMs!.max,
    ]) {
      expect(Number.isFinite(v)).toBe(true);
      expect(v).toBeGreaterThan(0);
    }
    expect(x.expiryLagMs!.count).toBe(30);
    expect(x.resale.onSaleMs!.count).toBe(60);
    expect(x.resale.lastReturnToSoldOutMs!).toBeLessThanOrEqual(x.resale.firstReturnToSoldOutMs!);
    // The reports carry it: a section in latest.md saying what it measures, the figures in latest.json.
    const md = readFileSync(join(outDir, 'latest.md'), 'utf8');
    const section = md.slice(
      md.indexOf('## The sale with returns'),
      md.indexOf('\n## ', md.indexOf('## The sale with returns') + 1),
    );
    expect(section).toContain('How long returned units take to sell again.');
    for (const row of [
      '(a) first sell-out',
      '(b) first return to the resale sold out',
      '(c) cancels',
      '(c) expiry lag',
    ])
      expect(section).toContain(`| ${row}`);
    expect(section).toContain(
      `**${x.cancels.perSec >= 100 ? x.cancels.perSec.toFixed(0) : x.cancels.perSec.toFixed(1)} cancels/s**`,
    );
    const json = JSON.parse(readFileSync(join(outDir, 'latest.json'), 'utf8'));
    const saved = json.scenarios.find((s: ScenarioResult) => s.id === 'returns-redlock-h20-s20');
    expect(saved.returns).toEqual(JSON.parse(JSON.stringify(x)));
  });

  it('should refuse every buyer of the sold-out product from the flag, and read what a refusal costs', () => {
    const r = byId('soldout-redlock-h0-s20');
    expect(r).toMatchObject({
      kind: 'soldout',
      groups: ['soldout'],
      target: 'service',
      workers: WORKERS,
      holdMs: 0,
      segments: 20,
      stock: 20,
      ordersInDb: 20,
      status: 'ok',
    });
    expect(Object.keys(r.statusCounts)).toEqual(['410']);
    expect(r.created).toBe(r.responses);
    expect(r.verification.checks.map((c) => c.name)).toEqual(
      expect.arrayContaining([
        'sold out before the load',
        'every answer 410',
        'nothing sold during the load',
        'refusals from memory',
      ]),
    );
    expect(r.verification.audit).toMatchObject({ totalStock: 20, remaining: 0, ordered: 20, orders: 20 });
    // The service's own count of its refusals, those answered after autocannon stopped counting included.
    const c = r.costs!;
    expect(c.unit).toBe('answer');
    expect(c.units).toBe(r.metrics.soldOut);
    expect(c.units).toBeGreaterThanOrEqual(r.created);
    // Refusals from the process's memory: next to no Redis script and no PostgreSQL statement per
    // refusal (the sold-out board's poll is per process and time, not per refusal).
    expect(r.metrics.soldOutInProcess).toBeGreaterThanOrEqual(0.95 * r.metrics.soldOut!);
    expect(c.perUnit.redisScripts).toBeLessThan(0.05);
    // PostgreSQL: the statements a process runs by the clock whatever the load (the board's poll,
    // 40 a second at the default SOLD_OUT_STALE_MS, the expiry sweep, product reads: 50 a second is
    // the allowance) and next to none per refusal. Not a bound per refusal alone: on a loaded
    // machine fewer refusals fit in the window and the clock's statements weigh more on each
    // (0.18-0.2 per refusal seen at a load average of 9-15).
    expect(c.totals.pgStatements).not.toBeNull();
    expect(c.totals.pgStatements!).toBeLessThan(0.05 * c.units + 50 * r.workers * c.windowS);
    expect(c.perUnit.pgWriteTransactions).toBeLessThan(0.01);
    for (const v of [c.perUnit.targetCpuUs!, c.perUnit.pgCpuUs!, c.perUnit.redisCpuUs]) {
      expect(Number.isFinite(v)).toBe(true);
      expect(v).toBeGreaterThan(0);
    }
    const md = readFileSync(join(outDir, 'latest.md'), 'utf8');
    expect(md).toContain('sold-out product: refusals (410) to distinct buyers');
  });

  it('should read the costs of every order scenario: Redis calls, PostgreSQL transactions and WAL, CPU', () => {
    for (const s of result.report.scenarios) {
      if (s.kind === 'returns') {
        expect(s.costs).toBeNull();
        continue;
      }
      const c = s.costs!;
      expect(c).toMatchObject({ unit: s.kind === 'steady' || s.kind === 'sale' ? 'order' : 'answer' });
      expect(c.units).toBeGreaterThan(0);
      expect(c.windowS).toBeGreaterThan(0);
      expect(Number.isFinite(c.perUnit.targetCpuUs) && c.perUnit.targetCpuUs! > 0).toBe(true);
      // PostgreSQL on this machine: its CPU is read. An order writes there, so it costs some; a health
      // check and a refusal from the sold-out flag never reach it, and may read 0 within /proc's 10 ms ticks.
      expect(Number.isFinite(c.perUnit.pgCpuUs) && c.perUnit.pgCpuUs! >= 0).toBe(true);
      if (s.kind === 'steady' || s.kind === 'sale') expect(c.perUnit.pgCpuUs).toBeGreaterThan(0);
    }
    // GET /health/live touches neither Redis nor PostgreSQL's writes.
    expect(byId('health-live').costs!.perUnit).toMatchObject({ redisScripts: 0, pgWriteTransactions: 0 });
    // ORDER_BATCH_MAX=1: one transaction per order, and at least the entry, the segment lock, its release and the exit in Redis.
    const one = byId('redlock-b1-h0-s20').costs!.perUnit;
    expect(one.pgWriteTransactions).toBeGreaterThan(0.95);
    expect(one.pgWriteTransactions).toBeLessThan(1.1);
    expect(one.redisScripts).toBeGreaterThanOrEqual(4);
    expect(one.pgWalBytes).toBeGreaterThan(0);
    // Group commit: no more transactions than orders (one per lock hold).
    expect(byId('redlock-h0-s20').costs!.perUnit.pgWriteTransactions).toBeLessThanOrEqual(1.01);
    // The bare-lua peer: one script and one INSERT per order.
    const lua = byId('bare-lua-h0-s20').costs!.perUnit;
    expect(lua.redisScripts).toBeGreaterThanOrEqual(1);
    expect(lua.pgWriteTransactions).toBeGreaterThan(0.95);
    const md = readFileSync(join(outDir, 'latest.md'), 'utf8');
    const section = md.slice(
      md.indexOf('## Costs per order and per refusal'),
      md.indexOf('\n## ', md.indexOf('## Costs per order and per refusal') + 1),
    );
    for (const s of result.report.scenarios.filter((x) => x.costs))
      expect(section).toContain(`| ${s.id} | ${s.costs!.unit} |`);
  });

  it('should run the Redis setups: the same load on the one redis-server, a Redlock quorum of 3 and a 3-master cluster, costs summed over every server', () => {
    // The one redis-server's rows are the group-commit comparison's, measured once.
    for (const id of ['redlock-h0-s20', 'redlock-b1-h0-s20']) expect(byId(id).groups).toContain('redis-setups');
    for (const [suffix, redis] of [
      ['-rq', 'quorum'],
      ['-rc', 'cluster'],
    ] as const) {
      for (const b of ['', '-b1']) {
        const r = byId(`redlock${b}-h0-s20${suffix}`);
        expect(r).toMatchObject({
          redis,
          groups: ['redis-setups'],
          kind: 'steady',
          workers: WORKERS,
          holdMs: 0,
          segments: 20,
          batchMax: b ? 1 : null,
          status: 'ok',
        });
        const c = r.costs!;
        const servers = c.redisServers!;
        expect(servers).toHaveLength(3);
        expect(new Set(servers.map((x) => x.server)).size).toBe(3);
        // The totals are the sums over the setup's servers, and every master took part (locks on all
        // three of a quorum; a cluster's segments spread over its masters).
        expect(servers.reduce((n, x) => n + x.totals.redisScripts, 0)).toBe(c.totals.redisScripts);
        expect(servers.reduce((n, x) => n + x.totals.redisCommands, 0)).toBe(c.totals.redisCommands);
        expect(servers.reduce((n, x) => n + x.totals.redisCpuS, 0)).toBeCloseTo(c.totals.redisCpuS, 6);
        for (const x of servers) expect(x.totals.redisScripts).toBeGreaterThan(0);
      }
    }
    // A quorum's lock and release go to every master: at ORDER_BATCH_MAX=1 each extra master sees at least one lock and one release per order.
    for (const x of byId('redlock-b1-h0-s20-rq').costs!.redisServers!.slice(1))
      expect(x.perUnit.redisScripts).toBeGreaterThanOrEqual(1.9);
    // Their own service starts, on their own Redis.
    expect(result.report.services.filter((svc) => svc.redis === 'quorum').map((svc) => svc.batchMax)).toEqual([
      null,
      1,
    ]);
    expect(result.report.services.filter((svc) => svc.redis === 'cluster').map((svc) => svc.batchMax)).toEqual([
      null,
      1,
    ]);
    // The section: latest.json's rows with ratios to the one redis-server, latest.md's table and the command line.
    const json = JSON.parse(readFileSync(join(outDir, 'latest.json'), 'utf8'));
    expect(json.redisSetups.rows.map((r: { id: string }) => r.id)).toEqual([
      'redlock-h0-s20',
      'redlock-h0-s20-rq',
      'redlock-h0-s20-rc',
      'redlock-b1-h0-s20',
      'redlock-b1-h0-s20-rq',
      'redlock-b1-h0-s20-rc',
    ]);
    const q = json.redisSetups.rows[1];
    expect(q.vsSingle.ordersPerSec).toBeCloseTo(
      byId('redlock-h0-s20-rq').ordersPerSec / byId('redlock-h0-s20').ordersPerSec,
      6,
    );
    expect(q.perServer).toHaveLength(3);
    expect(json.redisSetups.command).toBe(result.report.command);
    const md = readFileSync(join(outDir, 'latest.md'), 'utf8');
    const section = md.slice(md.indexOf('## Redis setups'), md.indexOf('\n## ', md.indexOf('## Redis setups') + 1));
    for (const id of ['redlock-h0-s20-rq', 'redlock-b1-h0-s20-rc']) expect(section).toContain(`(\`${id}\`)`);
    expect(section).toContain(`Command: \`${result.report.command}\``);
  });

  it('should report finite figures', () => {
    for (const s of result.report.scenarios) {
      expect(s.created).toBeGreaterThan(0);
      for (const v of [s.ordersPerSec, s.elapsedS, s.latency201Ms!.p50, s.latency201Ms!.p99, s.latency201Ms!.max]) {
        expect(Number.isFinite(v)).toBe(true);
        expect(v).toBeGreaterThan(0);
      }
      if (s.kind === 'sale' || s.kind === 'returns') expect(Number.isFinite(s.sellOutMs)).toBe(true);
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
