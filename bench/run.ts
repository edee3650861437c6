// CLI entry of `npm run bench`: parses the flags, runs runBenchmark() (bench/benchmark.ts), prints
// the table, and exits non-zero when a scenario FAILED. Ctrl-C stops the load and everything the
// benchmark started before exiting; a second Ctrl-C exits at once.
import { BenchmarkOptions, runBenchmark } from './benchmark';
import { renderTable } from './report';

const HELP = `Usage: npm run bench -- [flags]      (or: node dist/bench/run.js [flags] after a build)

  --duration S           seconds of load per steady-state scenario (default 10; --quick: 3)
  --connections N        autocannon connections (default 100)
  --workers N            service processes, WORKERS (default 2)
  --segments LIST        segmented layouts compared with 1 segment (default 20)
  --hold LIST            ORDER_HOLD_MS values of the comparison (default 0,20)
  --sweep [LIST]         segment sweep (default on: 1,2,5,10,20,50; --quick: 1,5,20)
  --sweep-hold MS        hold time of the sweep and of the sale (default 20)
  --no-sweep             skip the sweep
  --no-peer              skip the no-Redis-lock peer (STOCK_LOCKING=database)
  --no-sale              skip the literal sale
  --sale-stock N         units of the sale (default 1000; --quick: 200)
  --sale-segments N      segments of the segmented sale (default 20)
  --buyers N             distinct buyers of the sale (default 5000; --quick: 1000)
  --stock N              steady-state stock (default 1000000)
  --warm-up S            unmeasured load after each service start (default 3; --quick: 1)
  --lock-ttl MS          LOCK_TTL_MS (default 2000)
  --lock-wait MS         LOCK_WAIT_MS (default 30000, so the single lock queues rather than refuses)
  --lock-retry-delay MS  LOCK_RETRY_DELAY_MS (default 4)
  --lock-retry-jitter MS LOCK_RETRY_JITTER_MS (default 8)
  --database-url URL     use this PostgreSQL (default: DATABASE_URL, else an embedded one)
  --redis-url URL        use this Redis (default: REDIS_URL, else redis-server from PATH)
  --out DIR              where latest.json/.md/.svg go (default bench/results)
  --quick                smoke run: a few seconds per scenario, small sweep and sale
  -h, --help             this text
`;

class UsageError extends Error {}

function list(flag: string, v: string | undefined): number[] {
  if (v === undefined) throw new UsageError(`${flag} needs a value`);
  const xs = v.split(',').map((x) => Number(x.trim()));
  if (xs.length === 0 || xs.some((x) => !Number.isInteger(x) || x < 0)) throw new UsageError(`${flag}: expected a comma-separated list of whole numbers, got "${v}"`);
  return xs;
}

function num(flag: string, v: string | undefined, min = 0): number {
  const n = Number(v);
  if (v === undefined || v.trim() === '' || !Number.isFinite(n) || n < min) throw new UsageError(`${flag}: expected a number >= ${min}, got "${v ?? ''}"`);
  return n;
}

export function parseArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): BenchmarkOptions & { help?: boolean } {
  const o: BenchmarkOptions & { help?: boolean } = {};
  for (let i = 0; i < argv.length; i++) {
    const raw = argv[i];
    const [flag, inline] = raw.includes('=') ? [raw.slice(0, raw.indexOf('=')), raw.slice(raw.indexOf('=') + 1)] : [raw, undefined];
    const value = () => (inline !== undefined ? inline : argv[++i]);
    switch (flag) {
      case '-h':
      case '--help':
        o.help = true;
        break;
      case '--quick':
        o.quick = true;
        break;
      case '--duration':
        o.duration = num(flag, value(), 1);
        break;
      case '--connections':
        o.connections = num(flag, value(), 1);
        break;
      case '--workers':
        o.workers = num(flag, value(), 1);
        break;
      case '--segments':
        o.segments = list(flag, value()).filter((n) => n >= 1);
        break;
      case '--hold':
        o.holds = list(flag, value());
        break;
      case '--sweep': {
        // The list is optional: `--sweep` alone keeps the default sweep.
        const next = inline ?? argv[i + 1];
        if (next !== undefined && /^\d[\d,\s]*$/.test(next)) {
          o.sweep = list(flag, inline ?? argv[++i]).filter((n) => n >= 1);
        }
        break;
      }
      case '--no-sweep':
        o.sweep = null;
        break;
      case '--sweep-hold':
        o.sweepHold = num(flag, value());
        break;
      case '--no-peer':
        o.peer = false;
        break;
      case '--no-sale':
        o.sale = false;
        break;
      case '--sale-stock':
        o.saleStock = num(flag, value(), 1);
        break;
      case '--sale-segments':
        o.saleSegments = num(flag, value(), 1);
        break;
      case '--buyers':
        o.saleBuyers = num(flag, value(), 1);
        break;
      case '--stock':
        o.steadyStock = num(flag, value(), 1);
        break;
      case '--warm-up':
        o.warmUp = num(flag, value());
        break;
      case '--lock-ttl':
        o.lockTtlMs = num(flag, value(), 50);
        break;
      case '--lock-wait':
        o.lockWaitMs = num(flag, value());
        break;
      case '--lock-retry-delay':
        o.lockRetryDelayMs = num(flag, value(), 1);
        break;
      case '--lock-retry-jitter':
        o.lockRetryJitterMs = num(flag, value());
        break;
      case '--database-url':
        o.databaseUrl = value();
        break;
      case '--redis-url':
        o.redisUrl = value();
        break;
      case '--out':
        o.outDir = value();
        break;
      default:
        throw new UsageError(`unknown flag ${raw} (see --help)`);
    }
  }
  o.databaseUrl ??= env.DATABASE_URL || undefined;
  o.redisUrl ??= env.REDIS_URL || undefined;
  return o;
}

async function main(): Promise<number> {
  let options: ReturnType<typeof parseArgs>;
  try {
    options = parseArgs(process.argv.slice(2));
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`${err.message}\n\n${HELP}`);
      return 2;
    }
    throw err;
  }
  if (options.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const abort = new AbortController();
  let interrupts = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    if (++interrupts > 1) process.exit(130);
    process.stderr.write(`\n${sig}: stopping the load and everything the benchmark started (again to exit at once) ...\n`);
    abort.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const { report, files } = await runBenchmark({ ...options, signal: abort.signal });
    process.stdout.write(`\n${renderTable(report)}\n\nWrote ${files.md}, ${files.svg}, ${files.json}\n`);
    return report.scenarios.every((s) => s.status === 'ok') ? 0 : 1;
  } catch (err) {
    if (abort.signal.aborted) {
      process.stderr.write('benchmark interrupted; everything it started is stopped\n');
      return 130;
    }
    process.stderr.write(`benchmark failed: ${(err as Error).stack ?? String(err)}\n`);
    return 1;
  }
}

if (require.main === module) {
  main().then((code) => process.exit(code));
}
