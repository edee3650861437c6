// CLI entry of `npm run bench`: parses the flags, runs runBenchmark() (bench/benchmark.ts), prints
// the table, and exits non-zero when a scenario FAILED. Ctrl-C stops the load and everything the
// benchmark started before exiting; a second Ctrl-C exits at once.
import { runBenchmark } from './benchmark';
import { Flag, HELP, usageText, readFlags, toggle, value } from './cli';
import { dirname, join } from 'node:path';
import { renderConsole } from './report';
import { renderQueue, runQueueBenchmark } from './waiting-room';
import { BenchmarkOptions, PEER_NAMES, PeerName } from './options';
import { pick } from './pick';

// Every flag once: parseArgs reads them, --help prints them.
const FLAGS = {
  duration: value('S', 'seconds of load per steady-state scenario (default 10; --quick: 3)'),
  connections: value('N', 'autocannon connections (default 100)'),
  workers: value('N', 'WORKERS of the locking comparison, the sweep, the sale and the sale with returns (default 2)'),
  'speed-workers': value('N', 'WORKERS beside the peers and in the group-commit comparison (default 1, as each peer)'),
  peers: value('LIST', `bare peers to run (default ${PEER_NAMES.join(',')})`),
  'no-peers': toggle('skip the bare peers and the GET /health/live floor'),
  'no-group-commit': toggle('skip ORDER_BATCH_MAX=1 against group commit'),
  'batch-max': value('N', "ORDER_BATCH_MAX wherever a row names no other (default: unset, the service's default)"),
  'holds-max': value('N', "ORDER_HOLDS_MAX of every service start (default: unset, the service's default)"),
  'batch-sweep': value(
    'LIST',
    'also sweep these ORDER_BATCH_MAX values at every --hold, e.g. 1,8,32,128 (default: none)',
  ),
  'no-sold-out': toggle('skip the refusals of a sold-out product (--speed-workers processes, hold 0)'),
  'no-redis-setups': toggle(
    'skip the Redis setups: the speed load (group commit and ORDER_BATCH_MAX=1) on a Redlock quorum of 3 and a 3-master Redis Cluster, against the one redis-server (starts 2 more redis-servers and a cluster)',
  ),
  segments: value('LIST', 'segmented layouts compared with 1 segment (default 20)'),
  hold: value('LIST', 'ORDER_HOLD_MS values of the locking and group-commit comparisons (default 0,20)'),
  sweep: value('LIST', 'segment counts of the sweep (default 1,2,5,10,20,50; --quick: 1,5,20)'),
  'sweep-hold': value('MS', 'hold time of the sweep, the sale and the sale with returns (default 20)'),
  'no-sweep': toggle('skip the sweep'),
  'no-peer': toggle(
    'skip the no-Redis-lock mode (the bare peer with STOCK_LOCKING=database) in the comparison and the sweep',
  ),
  'no-sale': toggle('skip the literal sale'),
  'sale-stock': value('N', 'units of the sale and of the sale with returns (default 1000; --quick: 200)'),
  buyers: value(
    'N',
    'distinct buyers of the sale and of the first sell-out of the sale with returns (default 5000; --quick: 1000)',
  ),
  'no-returns': toggle('skip the sale with returns'),
  'no-waiting-room': toggle(
    'skip the waiting room against the same crowd without one (bench/waiting-room.ts, also npm run bench:queue)',
  ),
  'queue-buyers': value('N', 'buyers of the waiting-room scenario (default 50000; --quick: 5000)'),
  'warm-up': value('S', 'unmeasured load after each service start (default 3; --quick: 1)'),
  'lock-wait': value('MS', 'LOCK_WAIT_MS (default 30000, so the single lock queues rather than refuses)'),
  'database-url': value('URL', 'use this PostgreSQL (default: DATABASE_URL, else an embedded one)'),
  'redis-url': value('URL', 'use this Redis (default: REDIS_URL, else redis-server from PATH)'),
  out: value('DIR', 'where latest.md and latest.json go (default bench/results)'),
  quick: toggle('smoke run: a few seconds per scenario, small sweep and sale'),
  help: HELP,
} satisfies Record<string, Flag>;

const helpText = () =>
  usageText('npm run bench -- [flags]      (or: node dist/bench/run.js [flags] after npm run bench:build)', FLAGS, 26);

class UsageError extends Error {}

function list(flag: string, v: string): number[] {
  const xs = v.split(',').map((x) => Number(x.trim()));
  if (xs.some((x) => !Number.isInteger(x) || x < 0))
    throw new UsageError(`--${flag}: expected a comma-separated list of whole numbers, got "${v}"`);
  return xs;
}

function num(flag: string, v: string, min = 0): number {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n < min)
    throw new UsageError(`--${flag}: expected a number >= ${min}, got "${v}"`);
  return n;
}

function peerList(v: string): PeerName[] {
  const names = v.split(',').map((x) => x.trim());
  const unknown = names.filter((x) => !(PEER_NAMES as readonly string[]).includes(x));
  if (unknown.length > 0)
    throw new UsageError(`--peers: unknown peer ${unknown.join(', ')}; expected some of ${PEER_NAMES.join(',')}`);
  return names as PeerName[];
}

function int(flag: string, v: string, min: number): number {
  const n = num(flag, v, min);
  if (!Number.isInteger(n)) throw new UsageError(`--${flag}: expected a whole number >= ${min}, got "${v}"`);
  return n;
}

export function parseArgs(argv: string[], env: NodeJS.ProcessEnv = process.env) {
  const v = readFlags(argv, FLAGS, UsageError);
  const opt = <T>(x: string | undefined, f: (x: string) => T): T | undefined => (x === undefined ? undefined : f(x));
  if (v.sweep !== undefined && v['no-sweep']) throw new UsageError('--sweep and --no-sweep contradict each other');
  if (v.peers !== undefined && v['no-peers']) throw new UsageError('--peers and --no-peers contradict each other');
  return {
    ...pick(v, 'help', 'quick'),
    duration: opt(v.duration, (x) => num('duration', x, 1)),
    connections: opt(v.connections, (x) => num('connections', x, 1)),
    workers: opt(v.workers, (x) => num('workers', x, 1)),
    speedWorkers: opt(v['speed-workers'], (x) => num('speed-workers', x, 1)),
    peers: v['no-peers'] ? [] : opt(v.peers, peerList),
    batch: v['no-group-commit'] ? false : undefined,
    batchMax: opt(v['batch-max'], (x) => int('batch-max', x, 1)),
    holdsMax: opt(v['holds-max'], (x) => int('holds-max', x, 1)),
    batchSweep: opt(v['batch-sweep'], (x) => list('batch-sweep', x).filter((n) => n >= 1)),
    soldOut: v['no-sold-out'] ? false : undefined,
    redisSetups: v['no-redis-setups'] ? false : undefined,
    segments: opt(v.segments, (x) => list('segments', x).filter((n) => n >= 1)),
    holds: opt(v.hold, (x) => list('hold', x)),
    sweep: v['no-sweep'] ? null : opt(v.sweep, (x) => list('sweep', x).filter((n) => n >= 1)),
    sweepHold: opt(v['sweep-hold'], (x) => num('sweep-hold', x)),
    peer: v['no-peer'] ? false : undefined,
    sale: v['no-sale'] ? false : undefined,
    saleStock: opt(v['sale-stock'], (x) => num('sale-stock', x, 1)),
    saleBuyers: opt(v.buyers, (x) => num('buyers', x, 1)),
    returns: v['no-returns'] ? false : undefined,
    warmUp: opt(v['warm-up'], (x) => num('warm-up', x)),
    lockWaitMs: opt(v['lock-wait'], (x) => num('lock-wait', x)),
    databaseUrl: v['database-url'] ?? (env.DATABASE_URL || undefined),
    redisUrl: v['redis-url'] ?? (env.REDIS_URL || undefined),
    outDir: v.out,
    waitingRoom: !v['no-waiting-room'],
    queueBuyers: opt(v['queue-buyers'], (x) => int('queue-buyers', x, 100)),
  } satisfies BenchmarkOptions & { help?: boolean; waitingRoom: boolean; queueBuyers?: number };
}

async function main(): Promise<number> {
  let options: ReturnType<typeof parseArgs>;
  try {
    options = parseArgs(process.argv.slice(2));
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`${err.message}\n\n${helpText()}`);
      return 2;
    }
    throw err;
  }
  if (options.help) {
    process.stdout.write(helpText());
    return 0;
  }
  const abort = new AbortController();
  let interrupts = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    if (++interrupts > 1) process.exit(130);
    process.stderr.write(
      `\n${sig}: stopping the load and everything the benchmark started (again to exit at once) ...\n`,
    );
    abort.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const { waitingRoom, queueBuyers, ...benchOptions } = options;
    const { report, files } = await runBenchmark({ ...benchOptions, signal: abort.signal });
    process.stdout.write(`\n${renderConsole(report)}\n\nWrote ${files.md}, ${files.json}\n`);
    let ok = report.scenarios.every((s) => s.status === 'ok');
    if (waitingRoom && !abort.signal.aborted) {
      // After the rest, never beside it: its own PostgreSQL, Redis and service start.
      const queue = await runQueueBenchmark({
        buyers: queueBuyers ?? (options.quick ? 5000 : 50_000),
        units: options.quick ? 200 : 1000,
        connections: 200,
        pollersInFlight: 256,
        workers: 2,
        admissionTtlS: 120,
        outDir: dirname(files.md),
        log: (line) => process.stderr.write(`${line}\n`),
      });
      process.stdout.write(`\n${renderQueue(queue)}\nWrote ${join(dirname(files.md), 'queue.md')}\n`);
      ok &&= [...queue.withRoom.checks, ...queue.withoutRoom.checks].every((c) => c.ok);
    }
    return ok ? 0 : 1;
  } catch (err) {
    if (abort.signal.aborted) {
      process.stderr.write('benchmark interrupted; everything it started is stopped\n');
      return 130;
    }
    process.stderr.write(`benchmark failed: ${(err as Error).stack ?? String(err)}\n`);
    return 1;
  }
}

if (require.main === module) void main().then((code) => process.exit(code));
