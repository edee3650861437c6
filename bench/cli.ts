// The flags of the benchmark's commands: the helpers that make a flag table (`npm run scaling`'s is
// in scaling-model.ts) and `npm run bench`'s table itself, every flag once, read by node:util
// parseArgs and printed by --help. It imports nothing of the project: bench/main.cjs reads it with
// Node's type stripping to answer `npm run bench -- --help` before anything is built.
import { parseArgs } from 'node:util';

export interface Flag {
  type: 'string' | 'boolean';
  short?: string;
  /** The value's name in the help (string flags). */
  arg?: string;
  help: string;
}

export const value = (arg: string, help: string) => ({ type: 'string', arg, help }) as const;
export const toggle = (help: string) => ({ type: 'boolean', help }) as const;
export const HELP = { type: 'boolean', short: 'h', help: 'this text' } as const;

export function usageText(usage: string, flags: Record<string, Flag>, width: number): string {
  const rows = Object.entries(flags).map(([name, f]) => {
    const left = `${f.short ? `-${f.short}, ` : ''}--${name}${f.arg ? ` ${f.arg}` : ''}`;
    return `  ${left.padEnd(width)}${f.help}`;
  });
  return `Usage: ${usage}\n\n${rows.join('\n')}\n`;
}

/** The flags' values; parseArgs' own messages (unknown flag, missing value) are clear, only their kind changes. */
export function readFlags<T extends Record<string, Flag>>(argv: string[], flags: T, usage: new (m: string) => Error) {
  try {
    return parseArgs({ args: argv, options: flags, strict: true, allowPositionals: false }).values;
  } catch (err) {
    if ((err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) throw new usage((err as Error).message);
    throw err;
  }
}

/**
 * The peers a run can hold; bare-nolock and bare-one-lock are the bare peer without Redis locks and
 * on 1 segment; bare-held is the bare peer holding its lock BARE_HELD_MS, on 1 segment and on the
 * speed segments (the floor of the segments-against-one-lock target on this machine).
 */
export const PEER_NAMES = ['bare', 'bare-nolock', 'bare-one-lock', 'bare-lua', 'bare-held'] as const;
export type PeerName = (typeof PEER_NAMES)[number];

// Every flag once: parseArgs reads them, --help prints them.
export const BENCH_FLAGS = {
  duration: value('S', 'seconds of load per steady-state scenario (default 10; --quick: 3)'),
  requests: value('N', 'requests per steady-state scenario instead of --duration seconds (never nothing measured)'),
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
  ports: value(
    'LOW-HIGH',
    'every server the benchmark starts (PostgreSQL, Redis, the service, the peers) listens on a port of this range (default: FLASHSALE_PORTS, else any free port)',
  ),
  quick: toggle('smoke run: a few seconds per scenario, small sweep and sale'),
  help: HELP,
} satisfies Record<string, Flag>;

export const benchHelp = () =>
  usageText(
    'npm run bench -- [flags]      (or: node dist/bench/run.js [flags] after npm run bench:build)',
    BENCH_FLAGS,
    26,
  );
