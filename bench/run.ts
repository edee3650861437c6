// CLI entry of `npm run bench`: parses the flags, runs runBenchmark() (bench/benchmark.ts), prints
// the table, and exits non-zero when a scenario FAILED. Ctrl-C stops the load and everything the
// benchmark started before exiting; a second Ctrl-C exits at once.
import { runBenchmark } from './benchmark';
import { BENCH_FLAGS, benchHelp, PEER_NAMES, PeerName, readFlags } from './cli';
import { dirname, join } from 'node:path';
import { renderConsole } from './report';
import { renderQueue, runQueueBenchmark } from './waiting-room';
import { confinedPorts } from '../src/infrastructure/free-port';
import type { BenchmarkOptions } from './options';
import { pick } from './pick';

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

function portRange(v: string): string {
  try {
    confinedPorts(v);
  } catch (err) {
    throw new UsageError(`--ports: ${(err as Error).message.replace('FLASHSALE_PORTS', 'the range')}`);
  }
  return v;
}

function int(flag: string, v: string, min: number): number {
  const n = num(flag, v, min);
  if (!Number.isInteger(n)) throw new UsageError(`--${flag}: expected a whole number >= ${min}, got "${v}"`);
  return n;
}

export function parseArgs(argv: string[], env: NodeJS.ProcessEnv = process.env) {
  const v = readFlags(argv, BENCH_FLAGS, UsageError);
  const opt = <T>(x: string | undefined, f: (x: string) => T): T | undefined => (x === undefined ? undefined : f(x));
  if (v.sweep !== undefined && v['no-sweep']) throw new UsageError('--sweep and --no-sweep contradict each other');
  if (v.peers !== undefined && v['no-peers']) throw new UsageError('--peers and --no-peers contradict each other');
  return {
    ...pick(v, 'help', 'quick'),
    duration: opt(v.duration, (x) => num('duration', x, 1)),
    requests: opt(v.requests, (x) => int('requests', x, 1)),
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
    ports: opt(v.ports, portRange),
  } satisfies BenchmarkOptions & { help?: boolean; waitingRoom: boolean; queueBuyers?: number; ports?: string };
}

export async function main(): Promise<number> {
  let options: ReturnType<typeof parseArgs>;
  try {
    options = parseArgs(process.argv.slice(2));
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`${err.message}\n\n${benchHelp()}`);
      return 2;
    }
    throw err;
  }
  if (options.help) {
    process.stdout.write(benchHelp());
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
    const { waitingRoom, queueBuyers, ports, ...benchOptions } = options;
    // Every freePort() of this process (the servers, the services, the peers) reads it.
    if (ports) process.env.FLASHSALE_PORTS = ports;
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
