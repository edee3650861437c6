// `npm run bench:queue` (and the last part of `npm run bench`): the waiting room against the same
// crowd without one, in one service start, as bench/README.md describes: joins through autocannon,
// a paced poller that orders once admitted (paid 3 s later, at the checkout), the estimates checked in a sale with cancels,
// proof of work on and off, and every sale verified in PostgreSQL.
import { createHmac } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { solveChallenge } from 'altcha-lib/v1';
import Heap from 'mnemonist/heap';
import { Client } from 'pg';
import { Pool } from 'undici';
import { admissionStepProblems, bucketOfPosition, promiseBreaches, stepOutOfOrder } from '../harness/queue-order';
import { Audit, auditProduct, Check } from '../harness/verify';
import { verify } from '../src/cli/verify-queue';
import { LIVELY_S } from '../src/waiting-room/ticket-status';
import type { ServiceProcess } from '../harness/launcher';
import { CostProbe, costDeltas } from './costs';
import { IntakeReport, measureIntake } from './intake';
import { LoadSpec, nearestRank, runLoad, tally } from './load';
import { countOf } from './returns';
import { createProductViaApi } from './scenarios';
import { BENCH_SHOP_TOKEN } from './service';
import type { NewProduct } from './types';
import { machine, readFlags, RESULTS_DIR, runMain, Servers, splitFlags, withServers, writeResults } from './standalone';

const ADMIN_TOKEN = 'bench-queue-admin-token-0123456789';
const RATIO = 1.5;

export interface QueueOptions {
  buyers: number;
  units: number;
  connections: number;
  /** Poll requests in flight at once, over every buyer. */
  pollersInFlight: number;
  workers: number;
  /** The product's admissionTtlS (also what caps Retry-After: a quarter of it). */
  admissionTtlS: number;
  /** New users a turn of the proof-of-work comparison (default 5000). */
  powJoins?: number;
  /**
   * Seconds of each full-speed measure: the three calls' capacities and each intake run (default
   * 3). The specs' small crowd takes 1: they check that every part runs and reports, not its speed.
   */
  windowS?: number;
  /**
   * Seconds after ordering that a cancelling buyer of the estimate sale cancels (default 3): the
   * sale lasts a few of them, in steps. The specs' small crowd takes 1.
   */
  cancelAfterS?: number;
  outDir: string;
  log: (line: string) => void;
  /** Flags for the service's node, e.g. --cpu-prof --cpu-prof-dir=/tmp/prof (one profile per process). */
  nodeFlags?: string[];
  /** The intake part also logs PostgreSQL's time by statement and the lock waits it saw. */
  diagnose?: boolean;
}

/** What one run measured: the report, and the queue.json it writes. */
export type QueueReport = Awaited<ReturnType<typeof runQueueBenchmark>>;

/** The p50, p90 and p99 of a list (nearest rank); null for an empty one. */
export function percentiles(values: number[]): { p50: number | null; p90: number | null; p99: number | null } {
  if (values.length === 0) return { p50: null, p90: null, p99: null };
  const sorted = [...values].sort((a, b) => a - b);
  return { p50: nearestRank(sorted, 0.5), p90: nearestRank(sorted, 0.9), p99: nearestRank(sorted, 0.99) };
}

/**
 * The share of admission batches made in exact queue order: each starts right after the one
 * before it and was made no earlier. 1 when every batch does (and when there is none).
 */
export function fairnessShare(batches: Array<{ first: number; last: number; admittedAt: number }>): number {
  const inOrder = batches.filter((b, i) => stepOutOfOrder(b, batches[i - 1]) === null);
  return batches.length === 0 ? 1 : inOrder.length / batches.length;
}

/**
 * The share of pre-queue tickets (all, or a sample) that stand where the lottery puts them: ordered
 * by HMAC-SHA256(seed, ticketId), as the fairness record's algorithm says (written from its words,
 * not the service's code), against ordered by position. 1 exactly when the two orders agree.
 */
export function lotteryShare(seedHex: string, tickets: Array<{ id: string; position: number }>): number {
  if (tickets.length === 0) return 1;
  const seed = Buffer.from(seedHex, 'hex');
  const keyed = tickets.map((t) => ({ ...t, k: createHmac('sha256', seed).update(t.id, 'ascii').digest('hex') }));
  const byKey = [...keyed].sort((a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : a.id < b.id ? -1 : 1));
  const byPosition = [...keyed].sort((a, b) => a.position - b.position);
  return byKey.filter((t, i) => t.id === byPosition[i].id).length / tickets.length;
}

/** Buyers by the time their next poll is due: the poller takes the earliest in O(log n). */
export const dueHeap = <T extends { due: number }>() => new Heap<T>((a, b) => a.due - b.due);

/** How often a waiting ticket behind the units left polls: its Retry-After, the service's own constant. */
export const BEHIND_UNITS_POLL_S = LIVELY_S;

/**
 * 1,000,000 joins in one second, from the measured per-join costs, and the polls of that crowd
 * while it waits: each ticket every BEHIND_UNITS_POLL_S seconds (almost all of it is behind the units).
 * PostgreSQL: its CPU per ticket written and the seal's serial time per ticket (bench/intake.ts).
 */
export function millionJoins(
  cpuUsPerJoin: number | null,
  redisCommandsPerJoin: number,
  processes: number,
  roundTripMs: number,
  cpuUsPerPoll: number | null = null,
  intake: Pick<IntakeReport['buckets'], 'pgCpuUsPerJoin' | 'sealUsPerJoin' | 'walBytesPerJoin'> | null = null,
) {
  return {
    serviceCores: cpuUsPerJoin === null ? null : (1_000_000 * cpuUsPerJoin) / 1e6,
    pollsPerS: 1_000_000 / BEHIND_UNITS_POLL_S,
    pollCores: cpuUsPerPoll === null ? null : (1_000_000 / BEHIND_UNITS_POLL_S) * (cpuUsPerPoll / 1e6),
    redisCommandsPerS: 1_000_000 * redisCommandsPerJoin,
    // PostgreSQL sees at most JOIN_CALLS queue_join calls per process per round trip, and never more
    // than one per join: each call takes every join that came while the last was out.
    controlSlotCallsPerS: Math.min(1_000_000, Math.ceil(2 * processes * (1000 / roundTripMs))),
    pgCores: intake?.pgCpuUsPerJoin == null ? null : (1_000_000 * intake.pgCpuUsPerJoin) / 1e6,
    walMBps: intake?.walBytesPerJoin == null ? null : (1_000_000 * intake.walBytesPerJoin) / 1e6,
    /** The share of one PostgreSQL session's second the product's seals take: 1 is the ceiling. */
    sealShare: intake?.sealUsPerJoin == null ? null : (1_000_000 * intake.sealUsPerJoin) / 1e6,
  };
}

interface Buyer {
  userId: string;
  ticketId?: string;
  /** When the join was sent, and when its answer came (epoch ms). */
  sentAt: number;
  joinedAt: number;
  /** When an answer first told the ticket's place. */
  placedAt?: number;
  /** The join's answer said to poll at once (Retry-After 0: its place is being drawn), not sold out. */
  pollAtOnce?: boolean;
  due: number;
  /** The first admission time estimated after the start (epoch ms), when it was given, and when it was first seen admitted. */
  eta?: number;
  etaAt?: number;
  admittedSeenAt?: number;
  /** The ticket's place, once an answer gave it. */
  position?: number;
  /** The last answer said sold out. */
  soldOut?: boolean;
  /** When the buyer first knew the outcome: ordered, or told sold out / ended (epoch ms). */
  knewAt?: number;
  ordered: boolean;
  done: boolean;
}

// The paced poller's calls (polls, orders, the shop's pay and cancel) go through undici rather
// than node:http: the load generator shares the two cores with the service, and a node:http call
// cost it about twice the CPU of an undici one (63-71 against 24-35 µs a call, side by side against
// one server); profiled in the sale, the generator was 80-90 % busy, the poller setting the pace.
const pools = new Map<string, Pool>();

/** A call with its JSON answer (or its text) and Retry-After. */
async function call(base: string, method: string, path: string, body?: unknown, headers?: Record<string, string>) {
  let pool = pools.get(base);
  // Polls of tickets being drawn are held until the draw: a crowd's worth of them is out at once.
  if (!pool) pools.set(base, (pool = new Pool(base, { connections: 4096 })));
  const payload = body === undefined ? undefined : JSON.stringify(body);
  const r = await pool.request({
    method,
    path,
    body: payload,
    headers: payload === undefined ? headers : { 'content-type': 'application/json', ...headers },
    headersTimeout: 30_000,
    bodyTimeout: 30_000,
  });
  let answer: any = await r.body.text();
  try {
    answer = JSON.parse(answer);
  } catch {
    /* keep the text */
  }
  const ra = r.headers['retry-after'];
  return { status: r.statusCode, retryAfter: typeof ra === 'string' ? Number(ra) : null, body: answer };
}

function shop(url: string, orderId: number, action: 'pay' | 'cancel', userId: string) {
  return call(url, 'POST', `/orders/${orderId}/${action}`, { userId }, { authorization: `Bearer ${BENCH_SHOP_TOKEN}` });
}

const createProduct = (url: string, p: NewProduct) => createProductViaApi(url, ADMIN_TOKEN, p);

/** One kind of call at full speed for `windowS`: answers per second, service CPU (µs) and Redis commands per answer. */
async function rateOf(
  svc: ServiceProcess,
  probe: CostProbe,
  windowS: number,
  load: Omit<LoadSpec, 'url' | 'durationS' | 'timeoutS'>,
) {
  const before = await probe.snapshot(svc.pid);
  const r = await runLoad({ url: svc.url, durationS: windowS, timeoutS: 20, ...load });
  const { perUnit } = costDeltas(before, await probe.snapshot(svc.pid), 'answer', r.created);
  return { perS: r.created / r.elapsedS, cpuUs: perUnit.targetCpuUs, redisCommands: perUnit.redisCommands };
}

/**
 * The crowd's three calls, each at full speed for `windowS` on the same connections: GET /health/live
 * (the floor), a poll of one waiting ticket, and joins of new users (a ticket each) to an open waiting room.
 */
async function capacities(svc: ServiceProcess, probe: CostProbe, connections: number, windowS: number) {
  const healthLive = () =>
    rateOf(svc, probe, windowS, { get: '/health/live', okStatus: 200, connections, label: 'GET /health/live' });
  await healthLive(); // warm-up, not measured
  const health = await healthLive();
  const productId = await createProduct(svc.url, { name: 'bench polls', stock: 1, segments: 1, waitingRoom: true });
  let token = '';
  for (let i = 0; i < 50 && token === ''; i++) {
    const joined = await call(svc.url, 'POST', `/products/${productId}/queue`, { userId: `poll-${i}` });
    // The poll right after the join waits for the ticket's place (its bucket's draw).
    const r = await call(svc.url, 'GET', `/products/${productId}/queue/${joined.body.id}`);
    if (i >= 5 && r.body.status === 'waiting' && r.body.position !== null) token = joined.body.id as string;
  }
  if (token === '') throw new Error('no waiting ticket to poll');
  const get = `/products/${productId}/queue/${token}`;
  const poll = await rateOf(svc, probe, windowS, { get, okStatus: 200, connections, label: 'GET a waiting ticket' });
  const joinAs = (prefix: string) =>
    rateOf(svc, probe, windowS, {
      post: `/products/${productId}/queue`,
      bodyOf: (n) => JSON.stringify({ userId: `${prefix}-${n}` }),
      connections,
      label: 'joins of new users',
    });
  await joinAs('warm'); // warm-up, not measured
  return { health, poll, join: await joinAs('full') };
}

/** The service's settings for this benchmark, whole or in part. */
const serviceEnv = (workers: number) => ({
  WORKERS: String(workers),
  LOCK_WAIT_MS: '30000',
  DB_TIMEOUT_MS: '30000',
  ADMISSION_RATIO: String(RATIO),
  // Proof of work (its products only): a cheap first step the load generator can solve for
  // thousands of buyers, held there (the crowd never counts as one that raises it).
  POW_STEPS: String(POW_STEP),
  POW_JOINS_PER_S: '1000000',
  // A crowd comes from many addresses; here from one, with its held polls.
  MAX_CONNECTIONS_PER_IP: '0',
});

/** The intake part (bench/intake.ts) on the service's PostgreSQL, its products made through the service. */
function intakeOf(
  svc: ServiceProcess,
  s: Pick<Servers, 'db' | 'databaseUrl' | 'probe'>,
  o: Pick<QueueOptions, 'log' | 'diagnose' | 'windowS'>,
): Promise<IntakeReport> {
  return measureIntake({
    ...s,
    postgresPid: svc.pid,
    newProduct: () => createProduct(svc.url, { name: 'bench intake', stock: 1, segments: 1, waitingRoom: true }),
    log: o.log,
    diagnose: o.diagnose,
    seconds: o.windowS,
  });
}

/**
 * `--only intake`: the intake part alone (bench/intake.ts), with the service started as in the
 * whole run, so that the two designs can be compared in a minute. Writes nothing to the results.
 */
export async function runIntakeOnly(
  o: Pick<QueueOptions, 'workers' | 'log' | 'nodeFlags' | 'diagnose'>,
): Promise<IntakeReport> {
  return withServers('queue', o.log, async ({ db, databaseUrl, probe, start }) => {
    const svc = await start(serviceEnv(o.workers), o.nodeFlags);
    // The whole run comes to the intake after its sales, with their tickets in the table and the
    // table analyzed: the intake's products are new to its statistics. So here, with one sale.
    const earlier = await createProduct(svc.url, {
      name: 'bench earlier sale',
      stock: 1,
      segments: 1,
      waitingRoom: true,
    });
    const users = Array.from({ length: 20_000 }, (_, i) => `earlier-${i}`);
    await db.query('SELECT count(*) FROM queue_join($1, $2, $2)', [earlier, users]);
    await db.query('ANALYZE queue_tickets');
    return intakeOf(svc, { db, databaseUrl, probe }, o);
  }).finally(() => Promise.all([...pools.values()].map((p) => p.close())).then(() => pools.clear()));
}

/**
 * `--only capacity`: the three calls at full speed alone (GET /health/live, a poll, a join), on a
 * start as in the whole run: what a change to the join's or the poll's path is compared by (run it
 * before and after, alternately). Writes nothing to the results.
 */
export async function runCapacityOnly(
  o: Pick<QueueOptions, 'workers' | 'log' | 'nodeFlags' | 'connections' | 'windowS'>,
) {
  return withServers('queue', o.log, async ({ probe, start }) => {
    const svc = await start(serviceEnv(o.workers), o.nodeFlags);
    return capacities(svc, probe, o.connections, o.windowS ?? 3);
  });
}

export async function runQueueBenchmark(o: QueueOptions) {
  const startedAt = new Date().toISOString();
  return withServers('queue', o.log, async ({ db, databaseUrl, probe, start }) => {
    const svc = await start(serviceEnv(o.workers), o.nodeFlags);
    const capacity = await capacities(svc, probe, o.connections, o.windowS ?? 3);
    for (const [what, r] of Object.entries(capacity))
      o.log(`${what} at full speed: ${r.perS.toFixed(0)}/s, ${r.cpuUs?.toFixed(0) ?? '-'} µs of service CPU each`);

    const proofOfWork = await proofOfWorkJoins(svc.url, o.connections, o.powJoins ?? 5000, o.log);
    const withRoom = await withWaitingRoom(o, svc, db, probe);
    const withoutRoom = await withoutWaitingRoom(o, svc, db, probe);
    // A second, smaller sale in which every second buyer cancels instead of paying, cancelAfterS
    // after ordering, so units come back over time and admissions go on in steps: what the first
    // estimates of the wait are measured against. At least 50 units: a dozen gave a small run two
    // or three admission steps, and at times no estimate to check.
    const eo = { ...o, buyers: Math.min(o.buyers, 5000), units: Math.max(50, Math.round(o.units / 5)) };
    const cancelAfterS = cancelAfterSOf(o);
    o.log(
      `estimates: ${eo.buyers} buyers, ${eo.units} units, every second order cancelled ${cancelAfterS} s after it was made ...`,
    );
    const estimate = {
      buyers: eo.buyers,
      units: eo.units,
      cancelEvery: 2,
      cancelAfterS,
      sale: await withWaitingRoom(eo, svc, db, probe, 2),
    };
    const rtt = await roundTripMs(db);
    const intake = await intakeOf(svc, { db, databaseUrl, probe }, o);
    const report = {
      startedAt,
      machine: machine(),
      buyers: o.buyers,
      units: o.units,
      workers: o.workers,
      admissionTtlS: o.admissionTtlS,
      healthLivePerS: capacity.health.perS,
      /** GET of a waiting ticket at full speed (not paced), the same way as GET /health/live. */
      waitingPollsPerS: capacity.poll.perS,
      capacity,
      withRoom,
      withoutRoom,
      intake,
      estimate,
      proofOfWork,
      millionJoins: millionJoins(
        capacity.join.cpuUs,
        capacity.join.redisCommands,
        100,
        rtt,
        capacity.poll.cpuUs,
        intake.buckets,
      ),
    };
    writeResults(o.outDir, 'queue', report, renderQueue(report));
    return report;
  }).finally(() => Promise.all([...pools.values()].map((p) => p.close())).then(() => pools.clear()));
}

/**
 * When a buyer polls next, as the waiting page does (src/wait-page/page/pacing.js): after the
 * answer's Retry-After, except that before the start a poll it puts within the first second after
 * the start is made at the start (50 ms after it).
 */
function nextPollAt(now: number, retryAfterS: number, startsAt: number): number {
  const at = now + Math.max(0, retryAfterS) * 1000;
  return now < startsAt && at >= startsAt && at < startsAt + 1000 ? startsAt + 50 : at;
}

/** When a cancelling buyer of the estimate sale cancels, seconds after ordering (QueueOptions.cancelAfterS). */
function cancelAfterSOf(o: Pick<QueueOptions, 'cancelAfterS'>): number {
  return o.cancelAfterS ?? 3;
}

/**
 * How long after ordering a buyer pays (the checkout). The sale without a room pays its orders once
 * its crowd is answered; paid at once, in the poller's slot, the payments took part in the race for
 * the last unit: on the same cores as the orders, and in the slots of the polls the sell-out waits
 * for (bench/README.md gives the figures).
 */
const PAY_AFTER_MS = 3000;

// The server checks one hash and one HMAC whatever the difficulty: the least step keeps solving cheap.
const POW_STEP = 100;

/**
 * Joins/s with proof of work on against off, in turns (off, on, off, on) of `joins` new users, each
 * on a product of its own (a waiting room, already started; the difficulty held at its first step).
 * The challenges are solved before a turn begins, so a turn times only the joins: what the door's
 * verification and single-use claim add to a join.
 */
async function proofOfWorkJoins(url: string, connections: number, joins: number, log: (line: string) => void) {
  const totals = { off: { joins: 0, s: 0 }, on: { joins: 0, s: 0 } };
  let refused = 0;
  for (const [turn, pow] of [false, true, false, true].entries()) {
    const productId = await createProduct(url, {
      name: `bench proof of work ${turn}`,
      stock: 1,
      segments: 1,
      waitingRoom: true,
      proofOfWork: pow,
      startsAt: new Date(Date.now() - 1000).toISOString(),
    });
    const headers: Array<Record<string, string>> = [];
    if (pow) {
      log(`solving ${joins} challenges ...`);
      for (let i = 0; i < joins; i++) {
        const c = (await call(url, 'GET', `/products/${productId}/queue/challenge`)).body;
        const solved = await solveChallenge(c.challenge, c.salt, c.algorithm, c.maxnumber).promise;
        if (solved === null) throw new Error('a challenge had no solution');
        const { algorithm, challenge, salt, signature } = c;
        const proof = { algorithm, challenge, number: solved.number, salt, signature };
        headers.push({ 'x-proof-of-work': Buffer.from(JSON.stringify(proof)).toString('base64') });
      }
    }
    const r = await runLoad({
      url,
      post: `/products/${productId}/queue`,
      amount: joins,
      connections,
      timeoutS: 30,
      label: pow ? 'joins with proof of work' : 'joins without proof of work',
      bodyOf: (n) => JSON.stringify({ userId: `pow-${turn}-${n}` }),
      ...(pow ? { headersOf: (n: number) => headers[n % joins] } : {}),
    });
    refused += joins - r.created;
    const t = pow ? totals.on : totals.off;
    t.joins += r.created;
    t.s += r.elapsedS;
  }
  const offPerS = totals.off.joins / totals.off.s;
  const onPerS = totals.on.joins / totals.on.s;
  log(`joins/s without proof of work ${offPerS.toFixed(0)}, with ${onPerS.toFixed(0)} (${refused} refused)`);
  return { joinsEach: joins, offPerS, onPerS, refused };
}

/** PostgreSQL's idle round trip here: a join group is one such call. */
async function roundTripMs(db: Client): Promise<number> {
  const started = process.hrtime.bigint();
  for (let i = 0; i < 200; i++) await db.query('SELECT 1');
  return Number(process.hrtime.bigint() - started) / 1e6 / 200;
}

/** The sale behind a waiting room; every cancelEvery-th buyer cancels the order instead of paying (0: all pay). */
async function withWaitingRoom(o: QueueOptions, svc: ServiceProcess, db: Client, probe: CostProbe, cancelEvery = 0) {
  const startsAt = Date.now() + 2000;
  const productId = await createProduct(svc.url, {
    name: 'bench queued sale',
    stock: o.units,
    segments: 10,
    waitingRoom: true,
    admissionTtlS: o.admissionTtlS,
    startsAt: new Date(startsAt).toISOString(),
  });
  const buyers: Buyer[] = [];
  const before = await probe.snapshot(svc.pid);
  // The paced poller: every buyer due now is polled, never more than pollersInFlight at once.
  let paid = 0;
  let ordersMade = 0;
  let polls = 0;
  // Each order's pay or cancel, made later (PAY_AFTER_MS, cancelAfterS) and awaited at the end.
  const checkouts: Array<Promise<unknown>> = [];
  let soldOutAt: number | null = null;
  // The last unit taken: the order that reserved it answered 201, as the sale without a room is timed.
  let reserved = 0;
  let lastUnitAt: number | null = null;
  const statusCounts: Record<string, number> = {};
  const pollStarted = Date.now();
  const deadline = pollStarted + 300_000;
  // A buyer polls when its last answer's Retry-After says (as the buyer's waiting page does), while others still join.
  const queue = dueHeap<Buyer>();
  let joining = true;
  /** What a ticket's answer, the join's or a poll's, tells its buyer (a join, of a new user, is never told ordered). */
  const see = (b: Buyer, t: any, now: number) => {
    if (typeof t.position === 'number') {
      b.position = t.position;
      b.placedAt ??= now;
    }
    if (t.status === 'waiting' && b.eta === undefined && now >= startsAt && t.estimatedWaitS !== null) {
      b.eta = now + t.estimatedWaitS * 1000;
      b.etaAt = now;
    }
    if (['ordered', 'ended', 'sold_out'].includes(t.status)) b.knewAt ??= now;
    b.soldOut = t.status === 'sold_out';
  };
  /**
   * A buyer is polled, and put back in the heap, until it is settled. A buyer told sold out while
   * units may still come back (some not yet paid) polls on as Retry-After says: a cancel or an
   * expiry can admit it yet. Its outcome counts as known from the first such answer.
   */
  const settled = (b: Buyer) => b.done || (b.soldOut === true && soldOutAt !== null);
  const poll = async (b: Buyer): Promise<void> => {
    const r = await call(svc.url, 'GET', `/products/${productId}/queue/${b.ticketId}`).catch(() => null);
    polls++;
    if (r !== null) tally(statusCounts, r.status === 200 ? String(r.body.status) : `${r.status} ${r.body?.code}`);
    const now = Date.now();
    b.due = r === null ? now + 1000 : nextPollAt(now, r.retryAfter ?? 1, startsAt);
    if (r?.status !== 200) return;
    see(b, r.body, now);
    if (r.body.status === 'admitted' && !b.ordered) {
      b.admittedSeenAt ??= now;
      const order = await call(svc.url, 'POST', '/orders', {
        userId: b.userId,
        productId,
        admission: r.body.admission,
      }).catch(() => null);
      const answered = order === null ? 'order: no answer' : `order ${order.status} ${order.body?.code ?? ''}`.trim();
      tally(statusCounts, answered);
      if (order?.status === 201) {
        b.ordered = true;
        b.done = true;
        b.knewAt = Date.now();
        if (++reserved === o.units) lastUnitAt = b.knewAt;
        // Every cancelEvery-th order made, counted in the order they were made (not by the buyer's
        // id: which ids the lottery puts first would then decide how many units come back).
        if (cancelEvery > 0 && ++ordersMade % cancelEvery === 0) {
          // The unit comes back on sale cancelAfterS later (the buyer thinks it over): admissions
          // then go on for a while, in steps, and the waits an estimate is checked against last
          // seconds, not one tick.
          const orderId = order.body.id as number;
          checkouts.push(
            sleep(cancelAfterSOf(o) * 1000).then(() => shop(svc.url, orderId, 'cancel', b.userId).catch(() => null)),
          );
          return;
        }
        const orderId = order.body.id as number;
        checkouts.push(
          sleep(PAY_AFTER_MS).then(async () => {
            const pay = await shop(svc.url, orderId, 'pay', b.userId).catch(() => null);
            if (pay?.status === 200 && ++paid === o.units) soldOutAt = Date.now();
          }),
        );
        return;
      }
    }
    if (r.body.status === 'ordered' || r.body.status === 'ended') b.done = true;
  };
  // The pollers start with the joins, as a crowd's early joiners poll while the rest still join.
  const pollers = Promise.all(
    Array.from({ length: o.pollersInFlight }, async () => {
      while (Date.now() < deadline) {
        const next = queue.peek();
        if (next === undefined && !joining) return;
        if (next === undefined || next.due > Date.now())
          await sleep(Math.max(0, Math.min(50, (next?.due ?? Infinity) - Date.now())));
        else {
          const b = queue.pop() as Buyer;
          if (!settled(b)) await poll(b);
          if (!settled(b)) queue.push(b);
        }
      }
    }),
  );
  // The joins, `connections` at once, each timed from its sending to its answer (the promise is
  // about both), through the poller's client.
  o.log(`joining ${o.buyers} buyers ...`);
  const joinsStarted = Date.now();
  const joinStatus: Record<string, number> = {};
  let sent = 0;
  await Promise.all(
    Array.from({ length: o.connections }, async () => {
      while (sent < o.buyers) {
        const userId = `q-${sent++}`;
        const sentAt = Date.now();
        const r = await call(svc.url, 'POST', `/products/${productId}/queue`, { userId }).catch(() => null);
        const now = Date.now();
        tally(joinStatus, r === null ? 'no answer' : String(r.status));
        if (r?.status !== 201) continue;
        const b: Buyer = { userId, ticketId: r.body.id, sentAt, joinedAt: now, due: 0, ordered: false, done: false };
        b.pollAtOnce = r.retryAfter === 0;
        see(b, r.body, now);
        // The first poll as the buyer's waiting page makes it, after the join's Retry-After.
        b.due = nextPollAt(now, r.retryAfter ?? 1, startsAt);
        buyers.push(b);
        if (!settled(b)) queue.push(b);
      }
    }),
  ).finally(() => (joining = false));
  const joinSeconds = (Date.now() - joinsStarted) / 1000;
  const joinCosts = costDeltas(before, await probe.snapshot(svc.pid), 'answer', buyers.length);
  const preQueue = buyers.filter((b) => b.joinedAt < startsAt).length;
  o.log(`${buyers.length} joins in ${joinSeconds.toFixed(1)} s (${preQueue} before the start)`);

  // Until every buyer knows the outcome (a buyer told sold out is not polled again).
  await pollers;
  await Promise.all(checkouts);
  const pollSeconds = (Date.now() - pollStarted) / 1000;
  const after = await probe.snapshot(svc.pid);
  const all = costDeltas(before, after, 'answer', buyers.length);
  o.log(
    `${polls} polls in ${pollSeconds.toFixed(1)} s; every unit paid ${soldOutAt === null ? 'never' : `${((soldOutAt - startsAt) / 1000).toFixed(1)} s after the start`}`,
  );

  // Fairness and lapses from PostgreSQL; the lottery from the revealed seed.
  const { rows: batchRows } = await db.query(
    `SELECT first_position::int AS first, last_position::int AS last, admitted_at AS "admittedAt", expires_at AS "expiresAt",
            units_left AS "unitsLeft", outstanding_before AS "outstandingBefore",
            (SELECT count(*)::int FROM orders o WHERE o.product_id = b.product_id
               AND o.admission_position BETWEEN b.first_position AND b.last_position) AS spent
       FROM admission_batches b WHERE product_id = $1 ORDER BY first_position`,
    [productId],
  );
  const batches = batchRows.map((r) => ({
    ...r,
    admittedAt: r.admittedAt.getTime(),
    expiresAt: r.expiresAt.getTime(),
  }));
  const lapsedWhileUnitsLeft = batches
    .filter((b) => soldOutAt === null || b.expiresAt < soldOutAt)
    .reduce((n, b) => n + (b.last - b.first + 1 - b.spent), 0);
  const fairness = await call(svc.url, 'GET', `/products/${productId}/queue/fairness`);
  const preTickets: Array<{ id: string; position: number }> = [];
  if (typeof fairness.body.seed === 'string') {
    for (const b of buyers.filter((x) => x.joinedAt < startsAt - 200).slice(0, 5000)) {
      const t = await call(svc.url, 'GET', `/products/${productId}/queue/${b.ticketId}`);
      if (t.status === 200 && typeof t.body.position === 'number')
        preTickets.push({ id: t.body.lotteryId, position: t.body.position });
    }
  }
  const knew = buyers.map((b) => b.knewAt);
  const crowdAnsweredS = knew.every((t) => t !== undefined) ? (Math.max(...knew) - joinsStarted) / 1000 : null;
  // A first estimate against the moment PostgreSQL admitted that place (not when its buyer next polled).
  const admittedAt = (position: number) => batches.find((x) => x.first <= position && position <= x.last)?.admittedAt;
  const estimated = buyers.flatMap((b) => {
    const at = b.position === undefined ? undefined : admittedAt(b.position);
    if (b.eta === undefined || b.etaAt === undefined || at === undefined || at <= b.etaAt) return [];
    return [{ errorS: Math.abs(at - b.eta) / 1000, share: Math.abs(at - b.eta) / (at - b.etaAt) }];
  });

  // The promise, from PostgreSQL's places and the published draws: a join answered before another
  // was sent is never placed behind it unless both fell in one bucket.
  const { rows: placeRows } = await db.query<{ user_id: string; position: number }>(
    `SELECT user_id, position::int AS position FROM queue_places($1)`,
    [productId],
  );
  const placeOf = new Map(placeRows.map((r) => [r.user_id, r.position]));
  const draws = (await call(svc.url, 'GET', `/products/${productId}/queue/draws`)).body.draws;
  const timed = buyers.flatMap((b) => {
    const position = placeOf.get(b.userId);
    return position === undefined ? [] : [{ sentAt: b.sentAt, answeredAt: b.joinedAt, position }];
  });
  const breaches = promiseBreaches(timed, bucketOfPosition(draws));
  // The moment a poll can tell a place is its bucket's draw: from each ticket's insert to it, and
  // from the bucket's end to it (how late the seal came), both by PostgreSQL's clock.
  const { rows: drawLag } = await db.query<{ joined: number; sealed: number }>(
    `SELECT extract(epoch FROM d.drawn_at - t.joined_at) * 1000 AS joined,
            extract(epoch FROM d.drawn_at) * 1000 - (t.bucket + 1) * w.bucket_ms AS sealed
       FROM queue_tickets t JOIN queue_draws d USING (product_id, bucket) JOIN waiting_rooms w USING (product_id)
      WHERE t.product_id = $1 AND t.bucket > 0`,
    [productId],
  );
  const verdict = await verify(svc.url, String(productId));

  const audit = await auditProduct(db, productId);
  const { rows: orderRows } = await db.query(
    `SELECT count(*)::int AS n, count(admission_position)::int AS admitted, count(DISTINCT admission_position)::int AS distinct
       FROM orders WHERE product_id = $1`,
    [productId],
  );
  const o0 = orderRows[0] as { n: number; admitted: number; distinct: number };
  const batchFaults = admissionStepProblems(batches, RATIO);
  const checks: Check[] = [
    stockCheck(audit),
    { name: 'sold out, every unit paid', ok: soldOutAt !== null, detail: `${paid} paid` },
    { name: 'every order spent an admission', ok: o0.admitted === o0.n, detail: `${o0.admitted} of ${o0.n}` },
    { name: 'no admission spent twice', ok: o0.distinct === o0.admitted, detail: `${o0.distinct} distinct` },
    {
      name: 'admission batches contiguous, in order, within the ratio',
      ok: batchFaults.length === 0,
      detail: `${batches.length} batches${batchFaults.length > 0 ? `: ${batchFaults.slice(0, 3).join('; ')}` : ''}`,
    },
    {
      name: 'pre-queue in the lottery order of the revealed seed',
      ok: preTickets.length === 0 || lotteryShare(fairness.body.seed as string, preTickets) === 1,
      detail: `${preTickets.length} pre-queue tickets checked`,
    },
    {
      name: 'every join placed, none behind a join of another bucket answered before it was sent',
      ok: placeOf.size === buyers.length && breaches.length === 0,
      detail: `${placeOf.size} of ${buyers.length} placed, ${breaches.length} breaches`,
    },
    {
      name: 'npm run verify-queue: every draw as its committed seed makes it',
      ok: verdict.ok,
      detail: `${verdict.draws} draws, ${verdict.tickets} tickets${verdict.problems.length > 0 ? `: ${verdict.problems.slice(0, 3).join('; ')}` : ''}`,
    },
  ];
  return {
    joinsPerS: buyers.length / joinSeconds,
    joinSeconds,
    /** From the first join to the moment the last buyer knew the outcome (ordered or sold out). */
    crowdAnsweredS,
    preQueue,
    pollsPerS: polls / pollSeconds,
    polls,
    /** The last unit reserved (as timed without a room); with cancels, the units-th order. */
    startToSoldOutS: lastUnitAt === null ? null : (lastUnitAt - startsAt) / 1000,
    startToAllPaidS: soldOutAt === null ? null : (soldOutAt - startsAt) / 1000,
    /** When the buyers who ordered first saw their admission, s after the start: what the sell-out waits for. */
    admissionSeenS: percentiles(
      buyers.flatMap((b) => (b.ordered && b.admittedSeenAt ? [(b.admittedSeenAt - startsAt) / 1000] : [])),
    ),
    lapsedWhileUnitsLeft,
    fairnessShare: fairnessShare(batches),
    /** The share of joins placed as the promise says (none behind a join of another bucket answered before it was sent). */
    promiseShare: timed.length === 0 ? 1 : 1 - breaches.length / timed.length,
    promiseBreaches: breaches.length,
    draws: draws.filter((d: { tickets: number }) => d.tickets > 0).length,
    /**
     * From a join's answer to the first answer that told its place (ms): joins after the start told
     * to poll at once (the pre-queue's place comes at the start; a join told sold out polls later).
     */
    placeKnownMs: percentiles(
      buyers.flatMap((b) =>
        b.placedAt !== undefined && b.joinedAt >= startsAt && b.pollAtOnce === true ? [b.placedAt - b.joinedAt] : [],
      ),
    ),
    /** How many joins placeKnownMs counts. */
    placeKnownCount: buyers.filter((b) => b.placedAt !== undefined && b.joinedAt >= startsAt && b.pollAtOnce === true)
      .length,
    /** From a join's insert to its bucket's draw, the moment a poll can tell its place (ms, PostgreSQL's clock; joins after the start). */
    drawnAfterJoinMs: percentiles(drawLag.map((r) => Number(r.joined))),
    /** From a bucket's end to its draw, per ticket (ms, PostgreSQL's clock). */
    drawnAfterBucketMs: percentiles(drawLag.map((r) => Number(r.sealed))),
    lotteryShare: preTickets.length === 0 ? null : lotteryShare(fairness.body.seed as string, preTickets),
    etaErrorS: percentiles(estimated.map((e) => e.errorS)),
    /** The same error as a share of the real wait (from the estimate to the admission). */
    etaErrorShare: percentiles(estimated.map((e) => e.share)),
    etaSamples: estimated.length,
    redisCommandsPerTicket: all.perUnit.redisCommands,
    pgTransactionsPerBuyer: (after.pgNextXid - before.pgNextXid) / o.buyers,
    pgStatementsPerBuyer: all.perUnit.pgStatements ?? null,
    serviceCpuUsPerJoin: joinCosts.perUnit.targetCpuUs ?? null,
    redisCommandsPerJoin: joinCosts.perUnit.redisCommands,
    redisCpuUsPerJoin: joinCosts.perUnit.redisCpuUs,
    statusCounts: {
      ...statusCounts,
      ...Object.fromEntries(Object.entries(joinStatus).map(([k, v]) => [`join ${k}`, v])),
    },
    checks,
  };
}

const stockCheck = (audit: Audit): Check => ({
  name: 'I1: stock + live orders = stocked, no segment below 0',
  ok: audit.remaining + audit.ordered === audit.totalStock && audit.negativeSegments === 0,
  detail: JSON.stringify(audit),
});

async function withoutWaitingRoom(o: QueueOptions, svc: ServiceProcess, db: Client, probe: CostProbe) {
  const productId = await createProduct(svc.url, { name: 'bench open sale', stock: o.units, segments: 10 });
  const orders: Array<{ id: number; userId: string }> = [];
  const before = await probe.snapshot(svc.pid);
  o.log(`${o.buyers} buyers ordering directly ...`);
  const load = await runLoad({
    url: svc.url,
    productId,
    userPrefix: 'open-',
    amount: o.buyers,
    connections: o.connections,
    timeoutS: 45,
    label: 'orders',
    progress: o.log,
    onAnswer: (status, body) => {
      if (status === 201) orders.push(JSON.parse(body));
    },
  });
  for (const { id, userId } of orders) await shop(svc.url, id, 'pay', userId);
  const after = await probe.snapshot(svc.pid);
  const costs = costDeltas(before, after, 'answer', o.buyers);
  const audit = await auditProduct(db, productId);
  return {
    ordersPerS: load.created / ((load.lastCreatedAtMs ?? load.elapsedS * 1000) / 1000),
    /** From the first order to the last answer. */
    crowdAnsweredS: load.elapsedS,
    startToSoldOutS: load.lastCreatedAtMs === null ? null : load.lastCreatedAtMs / 1000,
    pgTransactionsPerBuyer: (after.pgNextXid - before.pgNextXid) / o.buyers,
    pgStatementsPerBuyer: costs.perUnit.pgStatements ?? null,
    redisCommandsPerBuyer: costs.perUnit.redisCommands,
    errors5xx: countOf(load.statusCounts, (c) => c >= 500 && c < 600),
    timeouts: load.timeouts,
    statusCounts: load.statusCounts,
    checks: [stockCheck(audit), { name: 'sold out', ok: audit.remaining === 0, detail: `${load.created} orders` }],
  };
}

const f = (n: number | null | undefined, digits = 0) => (n == null || !Number.isFinite(n) ? '-' : n.toFixed(digits));

type Capacity = Awaited<ReturnType<typeof capacities>>;

/** The three calls at full speed, as rows of the report's table (its last column empty). */
function capacityRows(c: Capacity): string[] {
  return [
    `| joins of new users at full speed, /s (/ GET /health/live) | ${f(c.join.perS)} (${f(c.join.perS / c.health.perS, 2)}) | |`,
    `| polls of a waiting ticket at full speed, /s (/ GET /health/live) | ${f(c.poll.perS)} (${f(c.poll.perS / c.health.perS, 2)}) | |`,
    `| service CPU per call at full speed, µs: GET /health/live / a poll / a join (join / health) | ${f(c.health.cpuUs)} / ${f(c.poll.cpuUs)} / ${f(c.join.cpuUs)} (${f((c.join.cpuUs ?? NaN) / (c.health.cpuUs ?? NaN), 2)}) | |`,
  ];
}

/** `--only capacity`'s answer: the same rows as in the whole report. */
export function renderCapacity(c: Capacity): string {
  return ['| measure | with a waiting room | |', '|---|--:|--:|', ...capacityRows(c)].join('\n');
}

export function renderQueue(r: QueueReport): string {
  const { withRoom: w, withoutRoom: x, proofOfWork: pw, millionJoins: m, capacity: c } = r;
  const es = r.estimate.sale;
  return [
    `# The waiting room against the same crowd without one (${r.startedAt})`,
    '',
    `${r.machine.cores} cores, ${r.machine.memoryGb} GB, Node ${r.machine.node}; one service start (WORKERS=${r.workers}), ` +
      `${r.buyers} buyers, ${r.units} units, 10 segments, ADMISSION_RATIO ${RATIO}, admissionTtlS ${r.admissionTtlS}; the load ` +
      'generator, PostgreSQL and Redis share the same cores. GET /health/live of the same start: ' +
      `${f(r.healthLivePerS)}/s.`,
    '',
    '| measure | with a waiting room | without |',
    '|---|--:|--:|',
    ...capacityRows(c),
    `| the sale's joins/s (all ${r.buyers} joined in ${f(w.joinSeconds, 1)} s, polls and orders of those in meanwhile; ${w.preQueue} before the start) | ${f(w.joinsPerS)} | |`,
    `| polls/s (${w.polls} polls, paced by Retry-After) | ${f(w.pollsPerS)} | |`,
    `| joins/s with proof of work on / off (${pw.joinsEach} new users a turn, off-on-off-on; ${pw.refused} refused) | ${f(pw.onPerS)} / ${f(pw.offPerS)} (${f(pw.onPerS / pw.offPerS, 2)}) | |`,
    `| orders/s until sold out | | ${f(x.ordersPerS)} |`,
    `| seconds from the start to sold out: the last unit reserved (every unit paid) | ${f(w.startToSoldOutS, 1)} (${f(w.startToAllPaidS, 1)}) | ${f(x.startToSoldOutS, 1)} |`,
    `| seconds from the start until the buyers who ordered saw their admission, p50 / p90 (the pre-queue's first polls, behind the crowd's joins) | ${f(w.admissionSeenS.p50, 1)} / ${f(w.admissionSeenS.p90, 1)} | |`,
    `| seconds until every buyer knew the outcome (ordered or sold out), from the first call | ${f(w.crowdAnsweredS, 1)} | ${f(x.crowdAnsweredS, 1)} |`,
    `| admissions lapsed unspent while units were left | ${w.lapsedWhileUnitsLeft} | |`,
    `| fairness: admissions in exact queue order | ${f(w.fairnessShare, 3)} | |`,
    `| fairness against the promise: joins not placed behind a join of another bucket answered before they were sent (breaches) | ${f(w.promiseShare, 3)} (${w.promiseBreaches}) | |`,
    `| milliseconds from a join's answer to the answer that told its place, p50 / p99 (the ${w.placeKnownCount} joins after the start told to poll at once, ${w.draws} buckets drawn; Δ = 100 ms) | ${f(w.placeKnownMs.p50)} / ${f(w.placeKnownMs.p99)} | |`,
    `| milliseconds from a join's insert to its bucket's draw, when a poll can tell its place, p50 / p99 (PostgreSQL's clock); from the bucket's end to the draw, p50 / p99 | ${f(w.drawnAfterJoinMs.p50)} / ${f(w.drawnAfterJoinMs.p99)}; ${f(w.drawnAfterBucketMs.p50)} / ${f(w.drawnAfterBucketMs.p99)} | |`,
    `| pre-queue in the revealed lottery's order (share checked) | ${f(w.lotteryShare, 3)} | |`,
    `| error of the first estimated wait, p50 / p90 (s) | ${f(w.etaErrorS.p50, 1)} / ${f(w.etaErrorS.p90, 1)} | |`,
    `| the same, in a sale where every second order is cancelled ${r.estimate.cancelAfterS} s after it was made (${r.estimate.buyers} buyers, ${r.estimate.units} units; ${es.etaSamples} estimates checked): seconds, p50 / p90; share of the real wait, p50 / p90 | ${f(es.etaErrorS.p50, 1)} / ${f(es.etaErrorS.p90, 1)} s; ${f(es.etaErrorShare.p50, 2)} / ${f(es.etaErrorShare.p90, 2)} | |`,
    `| Redis commands per ticket (join, polls, order) / per buyer | ${f(w.redisCommandsPerTicket, 2)} | ${f(x.redisCommandsPerBuyer, 2)} |`,
    `| PostgreSQL transactions per buyer | ${f(w.pgTransactionsPerBuyer, 3)} | ${f(x.pgTransactionsPerBuyer, 3)} |`,
    `| PostgreSQL statements per buyer | ${f(w.pgStatementsPerBuyer, 3)} | ${f(x.pgStatementsPerBuyer, 3)} |`,
    `| 5xx / timeouts | | ${x.errors5xx} / ${x.timeouts} |`,
    `| service CPU over the sale's joining, per join (µs; polls and orders of those in included) | ${f(w.serviceCpuUsPerJoin)} | |`,
    '',
    `Answers with a waiting room: ${JSON.stringify(w.statusCounts)}. Without: ${JSON.stringify(x.statusCounts)}.`,
    '',
    '| check | | detail |',
    '|---|---|---|',
    ...Object.entries({ 'waiting room': w.checks, without: x.checks, 'cancelled orders': es.checks }).flatMap(
      ([sale, checks]) =>
        checks.map((c) => `| ${sale}: ${c.name} | ${c.ok ? 'pass' : 'FAILED'} | ${c.detail.replace(/\|/g, '/')} |`),
    ),
    '',
    ...renderIntake(r.intake),
    '',
    `**1,000,000 joins in one second**, from these costs: ${f(m.serviceCores)} service cores at ${f(c.join.cpuUs)} µs per join, ` +
      `and ${f(m.pollCores)} more for the crowd's ${f(m.pollsPerS)} polls/s while it waits (every ${BEHIND_UNITS_POLL_S} s, ${f(c.poll.cpuUs)} µs each); ` +
      `${f(m.redisCommandsPerS / 1e6, 1)} M Redis commands/s (${f(c.join.redisCommands, 2)} per join). PostgreSQL: at most two queue_join calls ` +
      `per process per round trip (${f(m.controlSlotCallsPerS)}/s for 100 processes at this machine's idle round trip), none holding ` +
      `anything every other needs; ${f(m.pgCores, 1)} cores of PostgreSQL CPU and ${f(m.walMBps)} MB/s of WAL for the tickets, and the ` +
      `seals of the product's buckets ${f(m.sealShare, 2)} of one session's second (\`npm run scaling\` plans the hosts).`,
    '',
  ].join('\n');
}

/** The intake table: one product's joins/s, the counter row beside the buckets, by writers. */
function renderIntake(i: IntakeReport): string[] {
  const rows = i.counterRow.runs.map((old, k) => {
    const next = i.buckets.runs[k];
    return `| ${old.writers} | ${f(old.joinsPerS)} (${f(old.msPerCall, 1)} ms a call) | ${f(next.joinsPerS)} (${f(next.msPerCall, 1)} ms a call) | ${f(next.joinsPerS / old.joinsPerS, 2)} |`;
  });
  return [
    `One product's intake, groups of ${i.group} new users back to back for ${i.secondsPerRun} s a run, on the same PostgreSQL in the same run:`,
    '',
    '| writers | counter row, joins/s | buckets, joins/s | buckets ÷ counter row |',
    '|--:|--:|--:|--:|',
    ...rows,
    '',
    `Serial part per group (what it holds that every writer of the product needs): the counter row ${f(i.counterRow.serialMsPerGroup, 1)} ms ` +
      `(the whole call, at 1 writer), the buckets ${f(i.buckets.serialMsPerGroup, 1)} ms (shared locks only). The seals, serial per product ` +
      `but off the join path: ${f(i.buckets.sealUsPerJoin, 2)} µs of PostgreSQL per ticket sealed (${f(i.buckets.sealMsPerCall, 2)} ms a seal). ` +
      `PostgreSQL per ticket written (1 writer): ${f(i.buckets.pgCpuUsPerJoin, 1)} µs of CPU, ${f(i.buckets.walBytesPerJoin)} bytes of WAL.`,
  ];
}

async function main(): Promise<void> {
  const flags = readFlags(
    [
      'buyers',
      'units',
      'connections',
      'pollers',
      'workers',
      'ttl',
      'pow-joins',
      'out',
      'node-flags',
      'only',
      'diagnose',
    ],
    'npm run bench:queue -- [--only intake|capacity] [--diagnose yes] [--buyers N (50000)] [--units N (1000)] [--connections N (200)] [--pollers N (2048)] [--workers N (2)] [--ttl S (120)] [--pow-joins N (5000)] [--out DIR (bench/results)] [--node-flags="--cpu-prof --cpu-prof-dir=DIR"]',
  );
  if (!flags) return;
  if (flags.only !== undefined) {
    if (flags.only === 'capacity') {
      const c = await runCapacityOnly({
        workers: Number(flags.workers ?? 2),
        connections: Number(flags.connections ?? 200),
        log: (line) => process.stderr.write(`${line}\n`),
        nodeFlags: splitFlags(flags['node-flags']),
      });
      process.stdout.write(`${renderCapacity(c)}\n`);
      return;
    }
    if (flags.only !== 'intake')
      throw new Error(`--only: "intake" or "capacity" is a part run alone, not "${flags.only}"`);
    const intake = await runIntakeOnly({
      workers: Number(flags.workers ?? 2),
      log: (line) => process.stderr.write(`${line}\n`),
      nodeFlags: splitFlags(flags['node-flags']),
      diagnose: flags.diagnose === 'yes',
    });
    process.stdout.write(`${renderIntake(intake).join('\n')}\n`);
    return;
  }
  const report = await runQueueBenchmark({
    buyers: Number(flags.buyers ?? 50_000),
    units: Number(flags.units ?? 1000),
    connections: Number(flags.connections ?? 200),
    pollersInFlight: Number(flags.pollers ?? 2048),
    workers: Number(flags.workers ?? 2),
    admissionTtlS: Number(flags.ttl ?? 120),
    powJoins: Number(flags['pow-joins'] ?? 5000),
    outDir: flags.out ?? RESULTS_DIR,
    log: (line) => process.stderr.write(`${line}\n`),
    nodeFlags: splitFlags(flags['node-flags']),
    diagnose: flags.diagnose === 'yes',
  });
  process.stdout.write(renderQueue(report));
  const checks = [...report.withRoom.checks, ...report.withoutRoom.checks, ...report.estimate.sale.checks];
  if (checks.some((c) => !c.ok)) process.exitCode = 1;
}

if (require.main === module) runMain('bench:queue failed: ', main);
