// One product's intake, the two designs side by side on the same PostgreSQL and the same run:
// the counter row (every group of joins numbered while holding the product's row in queue_counts,
// the design before buckets, installed here in a schema of its own from its migration's frozen
// text) against the buckets (each group writes its tickets under its bucket's shared lock; the
// service's admitter seals and draws them meanwhile). Joins of new users in groups, back to back,
// from 1, 2 and 4 writers (PostgreSQL sessions); and the serial part of each: what a group holds that
// every writer of the product needs. For `npm run bench:queue` (bench/waiting-room.ts).
import { Client } from 'pg';
import { randomBytes } from 'node:crypto';
import { QUEUE_JOIN_COUNTED } from '../migrations/1764450000000-PreQueueCount';
import { drawnOrder, ticketIdFor } from '../src/waiting-room/lottery';
import { CostProbe } from './costs';

const OLD = 'bench_counter_row';

/** The counter row's tables and its queue_join, in a schema of their own. */
async function installCounterRow(db: Client): Promise<void> {
  await db.query(`DROP SCHEMA IF EXISTS ${OLD} CASCADE`);
  await db.query(`CREATE SCHEMA ${OLD}`);
  await db.query(`SET search_path = ${OLD}, public`);
  await db.query(`
    CREATE TABLE queue_tickets (
      product_id integer NOT NULL, user_id text NOT NULL, ticket_id text COLLATE "C" NOT NULL,
      kind char(1) NOT NULL CHECK (kind IN ('p', 'a')), lottery_key bytea, position bigint CHECK (position >= 1),
      joined_at timestamptz NOT NULL DEFAULT clock_timestamp(), PRIMARY KEY (product_id, user_id),
      CHECK (kind = 'a' OR lottery_key IS NOT NULL), CHECK (kind = 'p' OR position IS NOT NULL))`);
  await db.query(
    `CREATE UNIQUE INDEX queue_tickets_position ON queue_tickets (product_id, position) WHERE position IS NOT NULL`,
  );
  await db.query(`
    CREATE TABLE queue_counts (product_id integer PRIMARY KEY, pre_queue integer,
      arrivals bigint NOT NULL DEFAULT 0, pre_joined bigint NOT NULL DEFAULT 0)`);
  await db.query(QUEUE_JOIN_COUNTED);
  await db.query('SET search_path = public');
}

export interface IntakeRun {
  writers: number;
  joins: number;
  seconds: number;
  joinsPerS: number;
  /** Mean time of one group's call, ms (client side, a local round trip included). */
  msPerCall: number;
}

export interface IntakeSide {
  runs: IntakeRun[];
  /**
   * Per group: how long it holds what every writer of the product needs (ms). The counter row's
   * group holds the row for its whole call (taken at 1 writer, when no call waits for another);
   * a bucket group holds only shared locks, so nothing.
   */
  serialMsPerGroup: number;
}

export interface IntakeReport {
  group: number;
  secondsPerRun: number;
  counterRow: IntakeSide;
  buckets: IntakeSide & {
    /** The seal, serial per product but not on the join path: PostgreSQL's time in queue_seal per ticket sealed (µs). */
    sealUsPerJoin: number | null;
    sealMsPerCall: number | null;
    /** PostgreSQL's CPU and WAL per ticket written (1 writer). */
    pgCpuUsPerJoin: number | null;
    walBytesPerJoin: number | null;
    /** A process's CPU to draw one ticket into its bucket's order (an HMAC and its share of the sort), µs. */
    drawUsPerTicket: number;
  };
}

/** `writers` sessions calling `call` with groups of new users, back to back, for `seconds`. */
async function drive(
  databaseUrl: string,
  writers: number,
  seconds: number,
  prepare: (db: Client) => Promise<void>,
  call: (db: Client, users: string[]) => Promise<void>,
  group: number,
  prefix: string,
): Promise<IntakeRun> {
  const clients = await Promise.all(
    Array.from({ length: writers }, async () => {
      const c = new Client({ connectionString: databaseUrl });
      await c.connect();
      await prepare(c);
      return c;
    }),
  );
  let joins = 0;
  let calls = 0;
  let callMs = 0;
  const started = process.hrtime.bigint();
  const until = Date.now() + seconds * 1000;
  try {
    await Promise.all(
      clients.map(async (c, w) => {
        for (let n = 0; Date.now() < until; n++) {
          const users = Array.from({ length: group }, (_, i) => `${prefix}-${w}-${n}-${i}`);
          const t = process.hrtime.bigint();
          await call(c, users);
          callMs += Number(process.hrtime.bigint() - t) / 1e6;
          calls++;
          joins += group;
        }
      }),
    );
  } finally {
    await Promise.all(clients.map((c) => c.end()));
  }
  const elapsed = Number(process.hrtime.bigint() - started) / 1e9;
  return { writers, joins, seconds: elapsed, joinsPerS: joins / elapsed, msPerCall: callMs / calls };
}

/** PostgreSQL's time spent in the seals (queue_seal_ended) so far (pg_stat_statements), or null without it. */
async function sealTime(db: Client): Promise<{ ms: number; calls: number } | null> {
  try {
    const { rows } = await db.query(
      `SELECT coalesce(sum(total_exec_time), 0) AS ms, coalesce(sum(calls), 0)::int AS calls
         FROM pg_stat_statements WHERE query LIKE '%FROM queue_seal_ended(%'`,
    );
    return { ms: Number(rows[0].ms), calls: rows[0].calls as number };
  } catch {
    return null;
  }
}

/**
 * Where PostgreSQL's time goes during the intake: pg_stat_statements with the statements inside
 * functions counted (track = all from the start on), and pg_locks sampled every 50 ms for waits,
 * on a session of its own.
 */
class Diagnosis {
  private readonly waits = new Map<string, number>();
  private samples = 0;
  private readonly timer: NodeJS.Timeout;

  private constructor(private readonly db: Client) {
    this.timer = setInterval(() => void this.sample(), 50);
  }

  static async start(databaseUrl: string): Promise<Diagnosis> {
    const db = new Client({ connectionString: databaseUrl });
    await db.connect();
    await db.query(`ALTER SYSTEM SET pg_stat_statements.track = 'all'`);
    await db.query('SELECT pg_reload_conf()');
    await db.query('SELECT pg_stat_statements_reset()');
    return new Diagnosis(db);
  }

  private async sample(): Promise<void> {
    this.samples++;
    const { rows } = await this.db
      .query(`SELECT locktype || ' ' || mode AS what, count(*)::int AS n FROM pg_locks WHERE NOT granted GROUP BY 1`)
      .catch(() => ({ rows: [] as Array<{ what: string; n: number }> }));
    for (const r of rows as Array<{ what: string; n: number }>)
      this.waits.set(r.what, (this.waits.get(r.what) ?? 0) + r.n);
  }

  async report(log: (line: string) => void): Promise<void> {
    clearInterval(this.timer);
    const { rows } = await this.db.query(
      `SELECT calls, round(total_exec_time)::bigint AS ms, round(mean_exec_time::numeric, 2) AS mean_ms,
              regexp_replace(left(query, 150), '\\s+', ' ', 'g') AS query
         FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 15`,
    );
    log('PostgreSQL time by statement (pg_stat_statements, nested statements included):');
    for (const r of rows as Array<{ calls: string; ms: string; mean_ms: string; query: string }>)
      log(`${r.ms.padStart(8)} ms ${r.calls.padStart(7)} calls ${r.mean_ms.padStart(9)} ms each  ${r.query}`);
    log(`waiting locks in ${this.samples} samples of pg_locks: ${JSON.stringify(Object.fromEntries(this.waits))}`);
    await this.db.query(`ALTER SYSTEM RESET pg_stat_statements.track`);
    await this.db.query('SELECT pg_reload_conf()');
    await this.db.end();
  }
}

/**
 * Both designs, interleaved writer count by writer count (old, new; the same number of writers),
 * each on a product of its own. `newProduct` makes a product with a waiting room open now (through
 * the service, so its room, seeds and count rows are made as in a sale) and returns its id.
 */
export async function measureIntake(o: {
  databaseUrl: string;
  db: Client;
  probe: CostProbe;
  postgresPid: number;
  newProduct: () => Promise<number>;
  log: (line: string) => void;
  group?: number;
  seconds?: number;
  writers?: number[];
  /** Also log PostgreSQL's time by statement (nested ones included) and the lock waits seen. */
  diagnose?: boolean;
}): Promise<IntakeReport> {
  const group = o.group ?? 1000;
  const seconds = o.seconds ?? 3;
  await installCounterRow(o.db);
  const diagnosis = o.diagnose ? await Diagnosis.start(o.databaseUrl) : null;
  const oldRuns: IntakeRun[] = [];
  const newRuns: IntakeRun[] = [];
  const sealBefore = await sealTime(o.db);
  let newJoins = 0;
  let pgCpuUsPerJoin: number | null = null;
  let walBytesPerJoin: number | null = null;
  for (const writers of o.writers ?? [1, 2, 4]) {
    const oldProduct = 1_000_000 + writers;
    await o.db.query(`INSERT INTO ${OLD}.queue_counts (product_id, pre_queue) VALUES ($1, 0)`, [oldProduct]);
    const keyless = Array.from({ length: group }, () => Buffer.alloc(1));
    const old = await drive(
      o.databaseUrl,
      writers,
      seconds,
      (c) => c.query(`SET search_path = ${OLD}, public`).then(() => undefined),
      (c, users) =>
        c
          .query('SELECT count(*) FROM queue_join($1, true, $2, $2, $3)', [oldProduct, users, keyless])
          .then(() => undefined),
      group,
      `old${writers}`,
    );
    oldRuns.push(old);
    const productId = await o.newProduct();
    const before = await o.probe.snapshot(o.postgresPid);
    const run = await drive(
      o.databaseUrl,
      writers,
      seconds,
      () => Promise.resolve(),
      (c, users) => c.query('SELECT count(*) FROM queue_join($1, $2, $2)', [productId, users]).then(() => undefined),
      group,
      `new${writers}`,
    );
    const after = await o.probe.snapshot(o.postgresPid);
    newRuns.push(run);
    newJoins += run.joins;
    if (writers === 1 && before.pgCpuS !== null && after.pgCpuS !== null) {
      pgCpuUsPerJoin = ((after.pgCpuS - before.pgCpuS) * 1e6) / run.joins;
      walBytesPerJoin = (after.pgWalBytes - before.pgWalBytes) / run.joins;
    }
    o.log(
      `intake, ${writers} writer(s), groups of ${group}: counter row ${old.joinsPerS.toFixed(0)} joins/s, buckets ${run.joinsPerS.toFixed(0)} joins/s`,
    );
  }
  // The seals of the runs' buckets (the admitter makes them as the joins come): their time per ticket.
  await new Promise((r) => setTimeout(r, 1000));
  const sealAfter = await sealTime(o.db);
  const sealed =
    sealBefore && sealAfter ? { ms: sealAfter.ms - sealBefore.ms, calls: sealAfter.calls - sealBefore.calls } : null;
  if (diagnosis) await diagnosis.report(o.log);
  await o.db.query(`DROP SCHEMA ${OLD} CASCADE`);
  // The drawn order of a bucket of 100,000 tickets, as the service draws it, in this process.
  const ids = Array.from({ length: 100_000 }, (_, i) => ticketIdFor(1, `draw-${i}`));
  const drawStarted = process.hrtime.bigint();
  drawnOrder(randomBytes(32), ids);
  const drawUsPerTicket = Number(process.hrtime.bigint() - drawStarted) / 1e3 / ids.length;
  return {
    group,
    secondsPerRun: seconds,
    counterRow: { runs: oldRuns, serialMsPerGroup: oldRuns[0].msPerCall },
    buckets: {
      runs: newRuns,
      serialMsPerGroup: 0,
      sealUsPerJoin: sealed === null || newJoins === 0 ? null : (sealed.ms * 1000) / newJoins,
      sealMsPerCall: sealed === null || sealed.calls === 0 ? null : sealed.ms / sealed.calls,
      pgCpuUsPerJoin,
      walBytesPerJoin,
      drawUsPerTicket,
    },
  };
}
