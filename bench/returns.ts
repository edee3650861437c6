// The sale with returns (bench/README.md): the sale sells out, the shop pays most reservations at
// once, cancels some and leaves the rest to expire, and new buyers buy the returned units again;
// how long that takes, and every figure and every fate checked against PostgreSQL.
import http from 'node:http';
import { createHistogram } from 'node:perf_hooks';
import { request } from './http';
import { addCounts, autocannonTimeoutS, latencyOf, LoadResult, nearestRank, runLoad, tally } from './load';
import { scenarioDeltas, snapshot } from './metrics';
import { auditProduct, Check, verify } from '../harness/verify';
import { ordersLoad, quietOrders, resultOf } from './scenario-result';
import { BENCH_SHOP_TOKEN } from './service';
import type {
  CallFigures,
  Fate,
  ReturnsFigures,
  ReturnsPlan,
  RunContext,
  ScenarioResult,
  ScenarioSpec,
  Spread,
} from './types';

/** Pay and cancel calls in flight at once: the shop's backend, with a pool of its own. */
export const BACKEND_CONCURRENCY = 32;
/** How long the resale may go on after the last reservation is due to expire before it counts as stuck. */
const RESALE_MARGIN_S = 20;

/**
 * The fate of the k-th reservation of the first sale (k counts its 201s as they arrive): of `stock`
 * reservations, round(stock x share) come back, spread evenly, and of those round(returns x
 * cancelShare) are cancelled, also spread evenly; the rest expire. Beyond `stock`: paid.
 */
export function fateOf(k: number, stock: number, plan: Pick<ReturnsPlan, 'share' | 'cancelShare'>): Fate {
  if (k >= stock) return 'pay';
  const returns = Math.round(stock * plan.share);
  const before = Math.floor((k * returns) / stock);
  if (Math.floor(((k + 1) * returns) / stock) === before) return 'pay';
  const cancels = Math.round(returns * plan.cancelShare);
  return Math.floor(((before + 1) * cancels) / returns) > Math.floor((before * cancels) / returns)
    ? 'cancel'
    : 'expire';
}

/** Nearest-rank percentiles of the values; null when there are none. */
export function spread(values: number[]): Spread | null {
  if (values.length === 0) return null;
  const v = [...values].sort((a, b) => a - b);
  return { count: v.length, p50: nearestRank(v, 0.5), p99: nearestRank(v, 0.99), max: v[v.length - 1] };
}

/** The shop's backend calling pay and cancel: keep-alive sockets, at most BACKEND_CONCURRENCY calls at once. */
function shopBackend(base: string, timeoutMs: number) {
  // Idle sockets closed after 2 s, well before the server's keep-alive timeout (see test/support/service.ts).
  const agent = new http.Agent({ keepAlive: true, maxSockets: BACKEND_CONCURRENCY, timeout: 2000 });
  const headers = { authorization: `Bearer ${BENCH_SHOP_TOKEN}` };
  let active = 0;
  const waiting: Array<() => void> = [];
  /** Pays or cancels the order; status 0: no answer (a connection error or a timeout). */
  const post = async (o: Reservation, action: 'pay' | 'cancel') => {
    const path = `/orders/${o.id}/${action}`;
    if (active >= BACKEND_CONCURRENCY) await new Promise<void>((resolve) => waiting.push(resolve));
    active++;
    try {
      const r = await request(agent, base, 'POST', path, { userId: o.userId }, headers, timeoutMs);
      return { status: r.status, body: r.text, ms: r.ms };
    } catch (err) {
      return { status: 0, body: (err as Error).message, ms: 0 };
    } finally {
      active--;
      waiting.shift()?.();
    }
  };
  return { post, close: () => agent.destroy() };
}

/** The answers to one action's calls: the ids answered 200, status counts, the 200s' latencies; `onBad` gets the rest. */
function answerTally(action: 'pay' | 'cancel', onBad: (status: number, body: string) => void) {
  const ok = new Set<number>();
  const statusCounts: Record<string, number> = {};
  const latencies = createHistogram();
  const add = (o: Reservation, a: { status: number; body: string; ms: number }) => {
    tally(statusCounts, String(a.status));
    if (a.status === 200) {
      ok.add(o.id);
      latencies.record(Math.max(1, Math.round(a.ms * 1000)));
    } else onBad(a.status, `${action}: ${a.body}`);
  };
  return { ok, statusCounts, latencies, add };
}

/** One call per reservation of this fate, BACKEND_CONCURRENCY at a time; the ids answered 200 and the figures. */
export async function calls(
  backend: ReturnType<typeof shopBackend>,
  all: Array<Reservation & { fate: Fate }>,
  action: 'pay' | 'cancel',
  onBad: (status: number, body: string) => void,
): Promise<{ ok: Set<number>; figures: CallFigures }> {
  const list = all.filter((o) => o.fate === action);
  const { ok, statusCounts, latencies, add } = answerTally(action, onBad);
  const started = Date.now();
  await Promise.all(list.map(async (o) => add(o, await backend.post(o, action))));
  const elapsedMs = Date.now() - started;
  return {
    ok,
    figures: {
      calls: list.length,
      ok: ok.size,
      statusCounts,
      elapsedMs,
      perSec: elapsedMs > 0 ? ok.size / (elapsedMs / 1000) : 0,
      latencyMs: latencyOf(latencies),
    },
  };
}

function parseOrder(body: string) {
  const o = JSON.parse(body) as { id: number; userId: string };
  return { id: Number(o.id), userId: o.userId };
}
type Reservation = ReturnType<typeof parseOrder>;

/** The answers of the status codes `pred` picks. */
export const countOf = (counts: Record<string, number>, pred: (code: number) => boolean): number =>
  Object.entries(counts).reduce((s, [code, n]) => s + (pred(Number(code)) ? n : 0), 0);

interface OrderFact {
  id: number;
  userId: string;
  quantity: number;
  allocations: Array<{ segment: number; quantity: number }>;
  status: 'reserved' | 'paid' | 'cancelled' | 'expired';
  createdMs: number;
  expiresMs: number;
  closedMs: number | null;
}

/** Every order of the product, timestamps by PostgreSQL's clock (ms since the epoch). */
async function facts(ctx: RunContext, productId: number): Promise<OrderFact[]> {
  const { rows } = await ctx.db.query<OrderFact & { id: string }>(
    `SELECT id::text AS id, user_id AS "userId", quantity, allocations, status,
            (extract(epoch FROM created_at) * 1000)::float8 AS "createdMs",
            (extract(epoch FROM expires_at) * 1000)::float8 AS "expiresMs",
            (extract(epoch FROM closed_at) * 1000)::float8 AS "closedMs"
       FROM orders WHERE product_id = $1`,
    [productId],
  );
  return rows.map((r) => ({ ...r, id: Number(r.id) }));
}

/** Whether the two lists of orders hold as many units as each other in every segment. */
function sameBySegment(a: OrderFact[], b: OrderFact[]): boolean {
  const diff: Record<string, number> = {};
  for (const o of a) for (const x of o.allocations) tally(diff, String(x.segment), x.quantity);
  for (const o of b) for (const x of o.allocations) tally(diff, String(x.segment), -x.quantity);
  return Object.values(diff).every((n) => n === 0);
}

const sameSet = (a: Set<number>, b: Set<number>) => a.size === b.size && [...a].every((x) => b.has(x));

export async function runReturns(ctx: RunContext, spec: ScenarioSpec): Promise<ScenarioResult> {
  const { returnsPlan: plan, buyers } = spec;
  if (!plan || !buyers) throw new Error(`${spec.id}: the sale with returns needs buyers and a returns plan`);
  const productId = await ctx.createProduct({
    name: `bench ${spec.id}`,
    stock: spec.stock,
    segments: spec.segments,
    paymentTimeoutS: plan.paymentTimeoutS,
  });
  const before = await snapshot(ctx.url, ctx.workers);
  const backend = shopBackend(ctx.url, autocannonTimeoutS(ctx.lockWaitMs) * 1000);
  try {
    // 1. The sale, run as the literal sale runs it; each reservation gets its fate as its 201 arrives.
    const first: Array<Reservation & { fate: Fate }> = [];
    // The first few 5xx (or unanswered) bodies, for the report: which 503 it was.
    const samples5xx: string[] = [];
    const keep5xx = (status: number, body: string) => {
      if ((status >= 500 || status === 0) && samples5xx.length < 3) samples5xx.push(`${status} ${body.slice(0, 300)}`);
    };
    const sale = await runLoad({
      ...ordersLoad(ctx, productId, 'b', `${spec.id} sale`),
      amount: buyers,
      onAnswer: (status, body) => {
        if (status === 201) first.push({ ...parseOrder(body), fate: fateOf(first.length, spec.stock, plan) });
        else keep5xx(status, body);
      },
    });
    // Every buyer is answered and nothing has come back yet: the first sale is checked as the sale is.
    const firstCheck = verify(await auditProduct(ctx.db, productId), {
      statusCounts: sale.statusCounts,
      created: sale.created,
      allAnswered: sale.responses === buyers,
      expectSoldOut: true,
    });
    const planned: Record<Fate, number> = { pay: 0, cancel: 0, expire: 0 };
    for (const o of first) planned[o.fate]++;

    // 2. The shop's backend pays what stays sold, before anything comes back.
    const pays = await calls(backend, first, 'pay', keep5xx);

    // 3. Every unit not paid comes back: cancelled now, or expired at its expiresAt. New buyers ask
    //    from just before the first cancel until all of them sold again, each paying at once.
    const resaleTarget = first.length - pays.ok.size;
    const resold: Reservation[] = [];
    const resalePay = answerTally('pay', keep5xx);
    const resalePays: Array<Promise<void>> = [];
    const capS = Math.ceil(plan.paymentTimeoutS + plan.expirySweepMs / 1000 + RESALE_MARGIN_S);
    const resaleRun: Promise<LoadResult | null> =
      resaleTarget > 0
        ? runLoad({
            ...ordersLoad(ctx, productId, 'r', `${spec.id} resale`),
            durationS: capS,
            onAnswer: (status, body) => {
              if (status !== 201) return keep5xx(status, body);
              const o = parseOrder(body);
              resold.push(o);
              resalePays.push(backend.post(o, 'pay').then((a) => resalePay.add(o, a)));
            },
            stopWhen: () => resold.length >= resaleTarget,
          })
        : Promise.resolve(null);
    // Awaited below; until then a failure (an abort) must not count as unhandled.
    resaleRun.catch(() => undefined);
    const cancels = await calls(backend, first, 'cancel', keep5xx);
    const resale = await resaleRun;
    await Promise.all(resalePays);
    const endedAt = Date.now();

    // Abandoned requests (cut off when the resale stopped) are still served: wait for them as every scenario does.
    const ordersInDb = await quietOrders(ctx, productId, spec.holdMs);
    const after = await snapshot(ctx.url, ctx.workers);
    const audit = await auditProduct(ctx.db, productId);
    const orders = await facts(ctx, productId);

    // What PostgreSQL says happened.
    const firstOrders = orders.filter((o) => o.userId.startsWith(`b${productId}-`));
    const resaleLive = orders.filter(
      (o) => o.userId.startsWith(`r${productId}-`) && (o.status === 'reserved' || o.status === 'paid'),
    );
    const byStatus = (status: OrderFact['status']) => orders.filter((o) => o.status === status);
    const [cancelled, expired] = [byStatus('cancelled'), byStatus('expired')];
    const returned = [...cancelled, ...expired];
    const ids = (list: OrderFact[]) => new Set(list.map((o) => o.id));
    const statuses = { reserved: 0, paid: 0, cancelled: 0, expired: 0 };
    for (const o of orders) statuses[o.status]++;
    const units = (list: OrderFact[]) => list.reduce((s, o) => s + o.quantity, 0);
    const returnedUnits = { cancelled: units(cancelled), expired: units(expired) };
    const returnedTotal = returnedUnits.cancelled + returnedUnits.expired;

    // Each unit's time back on sale: the k-th returned unit (by closed_at) against the k-th resold
    // one (by created_at); the k-th resale needs k units back, so the pairs never cross. now() is a
    // transaction's start, so a resale that waited on a returning transaction may read a hair
    // early: clamped at 0.
    const backAt = returned.flatMap((o) => Array<number>(o.quantity).fill(o.closedMs ?? NaN)).sort((a, b) => a - b);
    const soldAt = resaleLive.flatMap((o) => Array<number>(o.quantity).fill(o.createdMs)).sort((a, b) => a - b);
    const pairs = Math.min(backAt.length, soldAt.length);
    const onSale = Array.from({ length: pairs }, (_, k) => Math.max(0, soldAt[k] - backAt[k]));
    const lastSold = soldAt.at(-1);
    const toSoldOut = (back?: number) =>
      lastSold === undefined || back === undefined ? null : Math.max(0, lastSold - back);
    const figures: ReturnsFigures = {
      paymentTimeoutS: plan.paymentTimeoutS,
      expirySweepMs: plan.expirySweepMs,
      planned,
      pays: pays.figures,
      cancels: cancels.figures,
      expiryLagMs: spread(expired.map((o) => Math.max(0, (o.closedMs ?? NaN) - o.expiresMs))),
      returnedUnits,
      resale: {
        requests: resale?.responses ?? 0,
        statusCounts: resale?.statusCounts ?? {},
        created: resale?.created ?? 0,
        elapsedS: resale?.elapsedS ?? 0,
        latency201Ms: resale?.latency201 ?? null,
        paysStatusCounts: resalePay.statusCounts,
        firstReturnToSoldOutMs: toSoldOut(backAt[0]),
        lastReturnToSoldOutMs: toSoldOut(backAt.at(-1)),
        onSaleMs: spread(onSale),
      },
      statuses,
    };

    // The checks: the first sale as the sale is checked, then the whole life of the product.
    const checks: Check[] = [];
    const add = (name: string, ok: boolean, detail: string) => checks.push({ name, ok, detail });
    const firstSale = ['sold out exactly', 'I3 no false sold-out', 'every 201 is an order', 'no 5xx answers'];
    for (const c of firstCheck.checks.filter((x) => firstSale.includes(x.name)))
      add(`first sale: ${c.name}`, c.ok, c.detail);
    const total = audit.ordered + audit.remaining;
    add(
      'I1 stock conserved',
      total === audit.totalStock,
      `live ${audit.ordered} + remaining ${audit.remaining} ${total === audit.totalStock ? '==' : '!='} stocked ${audit.totalStock}`,
    );
    add('I1 no segment below 0', audit.negativeSegments === 0, `${audit.negativeSegments} negative segment(s)`);
    add(
      'I2 no user with two live orders',
      audit.duplicateUsers === 0,
      `${audit.duplicateUsers} user(s) with more than one live order`,
    );
    const answers = {
      'POST /orders': addCounts(sale.statusCounts, resale?.statusCounts ?? {}),
      pay: addCounts(pays.figures.statusCounts, resalePay.statusCounts),
      cancel: cancels.figures.statusCounts,
    };
    const bad = Object.entries(answers)
      .map(([what, counts]) => [what, countOf(counts, (c) => c >= 500 || c === 0)] as const)
      .filter(([, n]) => n > 0);
    add(
      'no 5xx answers',
      bad.length === 0,
      bad.length === 0
        ? 'none, to orders, pays or cancels'
        : `${bad.map(([what, n]) => `${what}: ${n} 5xx or unanswered`).join(', ')}${samples5xx.length > 0 ? `; e.g. ${samples5xx.join(' | ')}` : ''}`,
    );
    const all201 = sale.created + (resale?.created ?? 0);
    add(
      'every 201 is an order',
      all201 <= ordersInDb,
      `${all201} answered 201 (${sale.created} + ${resale?.created ?? 0} resold), ${ordersInDb} orders stored`,
    );
    const tooLate = countOf(addCounts(pays.figures.statusCounts, cancels.figures.statusCounts), (c) => c === 409);
    add(
      'pays and cancels as planned',
      pays.ok.size === planned.pay && cancels.ok.size === planned.cancel,
      `${pays.ok.size} of ${planned.pay} paid, ${cancels.ok.size} of ${planned.cancel} cancelled${
        tooLate > 0
          ? `; ${tooLate} answered 409 (expired first: paymentTimeoutS ${plan.paymentTimeoutS} s is too short for this machine: raise returnsTimeoutS in runBenchmark's options)`
          : ''
      }`,
    );
    // I7: paid iff a payment was answered 200, cancelled iff a cancel was; the rest of the first sale expired.
    const firstLeft = new Set(firstOrders.filter((o) => !pays.ok.has(o.id) && !cancels.ok.has(o.id)).map((o) => o.id));
    const fates = [
      ['paid', sameSet(ids(byStatus('paid')), new Set([...pays.ok, ...resalePay.ok]))],
      ['cancelled', sameSet(ids(cancelled), cancels.ok)],
      ['expired', sameSet(ids(expired), firstLeft)],
      ['none reserved', statuses.reserved === 0],
    ] as const;
    const wrong = fates.filter(([, ok]) => !ok).map(([what]) => what);
    add(
      'statuses as answered',
      wrong.length === 0,
      `paid ${statuses.paid} (${pays.ok.size} + ${resalePay.ok.size} resold), cancelled ${statuses.cancelled}, expired ${statuses.expired} (planned ${planned.expire}), reserved ${statuses.reserved}${
        wrong.length > 0 ? `; differs from the answers: ${wrong.join(', ')}` : ''
      }`,
    );
    // Returned units go back to their own segment, and nothing else moves stock here: segment by
    // segment, what came back is what sold again, and nothing is left (the audit's remaining stock).
    const perSegment = sameBySegment(returned, resaleLive);
    add(
      'every returned unit resold exactly once',
      units(resaleLive) === returnedTotal && perSegment && audit.remaining === 0,
      `${returnedTotal} back (${returnedUnits.cancelled} cancelled, ${returnedUnits.expired} expired), ${units(resaleLive)} resold, ${
        perSegment ? 'equal in every segment' : '**not equal segment by segment**'
      }, ${audit.remaining} left`,
    );
    add(
      'resale sold out',
      resold.length === resaleTarget,
      `${resold.length} of ${resaleTarget} returned units sold again within ${resale ? `${resale.elapsedS.toFixed(1)} s` : '0 s'} (cap ${capS} s)`,
    );
    const sellOutMs = sale.lastCreatedAtMs;
    // Its phases mix orders, pays, cancels and expiries: no one unit to divide by, so no costs.
    const verification = { verified: checks.every((c) => c.ok), checks, audit };
    return resultOf(
      ctx,
      spec,
      sale,
      { productId, ordersInDb, metrics: scenarioDeltas(before, after, ordersInDb), costs: null, verification },
      {
        connections: Math.min(ctx.connections, buyers),
        elapsedS: (endedAt - sale.startedAtMs) / 1000,
        ordersPerSec: sellOutMs ? sale.created / (sellOutMs / 1000) : 0,
        errors: sale.errors + (resale?.errors ?? 0),
        timeouts: sale.timeouts + (resale?.timeouts ?? 0),
        sellOutMs,
        returns: figures,
      },
    );
  } finally {
    backend.close();
  }
}
