// The checker: reads a run's history (what every client was told, and when) against PostgreSQL's
// final state and what the shop received, and lists every anomaly it finds, by check. Each check
// names the invariant it stands for (I1-I9 of docs/design.md). Nothing here trusts the service's
// answers more than the database, or the database more than the answers: an anomaly is a place
// where the two disagree, or where either breaks a rule on its own.
import { evenSplit } from '../src/inventory/segment-plan';
import { admissionStepProblems } from '../harness/queue-order';
import { Complete, Entry, Op, operations } from './history';
import type { Delivery, StreamEvent } from './shop';
import type { Snapshot } from './snapshot';

export interface Anomaly {
  check: string;
  message: string;
}

export interface Liveness {
  /** Per service, ms from the last heal until GET /health answered 200 (null: never within the bound). */
  healthyAfterMs: Record<string, number | null>;
  boundMs: number;
  soldOut: boolean;
  soldOutMs: number | null;
}

export interface CheckInput {
  entries: Entry[];
  snapshot: Snapshot;
  followed: StreamEvent[];
  deliveries: Delivery[];
  liveness: Liveness;
}

export interface CheckReport {
  anomalies: Anomaly[];
  /** Every check that ran, with its anomaly count and what it looked at. */
  checks: Array<{ name: string; anomalies: number; looked: string }>;
  unknown: { orders: { total: number; tookEffect: number; didNot: number }; pays: number; cancels: number };
}

/** Slack between this machine's clock as the history reads it and PostgreSQL's (the same clock). */
const SLACK_MS = 50;
const TERMINAL = new Set(['paid', 'cancelled', 'expired']);

export function check(input: CheckInput): CheckReport {
  const ops = operations(input.entries);
  const found: Anomaly[] = [];
  const checks: CheckReport['checks'] = [];
  const run = (name: string, looked: string, body: (add: (message: string) => void) => void) => {
    const before = found.length;
    body((message) => found.push({ check: name, message }));
    checks.push({ name, anomalies: found.length - before, looked });
  };
  const snap = input.snapshot;
  const orders = new Map(snap.orders.map((o) => [o.id, o]));

  run('units (I1)', `${snap.products.length} products`, (add) => {
    for (const p of snap.products) {
      const segs = snap.segments.filter((s) => s.productId === p.id);
      const left = segs.reduce((a, s) => a + s.stock, 0);
      const live = snap.orders
        .filter((o) => o.productId === p.id && (o.status === 'reserved' || o.status === 'paid'))
        .reduce((a, o) => a + o.quantity, 0);
      if (left + live !== p.totalStock)
        add(`product ${p.id}: ${left} left + ${live} in live orders != ${p.totalStock} stocked`);
      for (const s of segs) if (s.stock < 0) add(`product ${p.id} segment ${s.idx}: stock ${s.stock}`);
      for (const o of snap.orders.filter((x) => x.productId === p.id)) {
        const taken = o.allocations.reduce((a, x) => a + x.quantity, 0);
        if (taken !== o.quantity) add(`order ${o.id}: allocations take ${taken} units for a quantity of ${o.quantity}`);
      }
    }
  });

  run('segments (I1, I4, I6)', `${snap.events.length} events replayed per segment in commit order`, (add) =>
    replaySegments(snap, add),
  );

  run('one live order per user and product (I2)', `${snap.orders.length} orders`, (add) => {
    const live = new Map<string, number[]>();
    for (const o of snap.orders) {
      if (o.status !== 'reserved' && o.status !== 'paid') continue;
      const k = `${o.productId}/${o.userId}`;
      live.set(k, [...(live.get(k) ?? []), o.id]);
    }
    for (const [k, ids] of live) if (ids.length > 1) add(`${k} holds ${ids.length} live orders: ${ids.join(', ')}`);
  });

  const orderOps = ops.filter((o) => o.invoke.f === 'order');
  const attribution = attribute(orderOps, snap);
  run(
    'acknowledged orders (I7)',
    `${orderOps.filter((o) => o.complete?.outcome === 'ok').length} orders answered 201`,
    (add) => {
      for (const op of orderOps) {
        if (op.complete?.outcome !== 'ok') continue;
        const id = Number(op.complete.value?.id);
        const o = orders.get(id);
        const a = op.invoke.args;
        if (!o) add(`op ${op.invoke.op}: order ${id} answered 201 is not in PostgreSQL`);
        else if (o.userId !== a.userId || o.productId !== a.productId || o.quantity !== a.quantity)
          add(
            `op ${op.invoke.op}: order ${id} is ${o.userId}/${o.productId}x${o.quantity} in PostgreSQL, asked ${String(a.userId)}/${String(a.productId)}x${String(a.quantity)}`,
          );
      }
    },
  );

  run('no order without a request that may have made it (I7)', `${snap.orders.length} orders`, (add) => {
    for (const o of snap.orders)
      if (!attribution.byOrder.has(o.id))
        add(
          `order ${o.id} (${o.userId}/${o.productId}, made ${new Date(o.createdAt).toISOString()}) matches no order request answered 201 or left open: a refusal or a failure that took effect`,
        );
    for (const [op, ids] of attribution.byUnknownOp)
      if (ids.length > 1) add(`op ${op}: one request, ${ids.length} orders (${ids.join(', ')})`);
  });

  run('order states (I7)', 'every answer about an order against its final state', (add) =>
    checkStates(ops, orders, snap, add),
  );

  run('payments (I7)', `${ops.filter((o) => o.invoke.f === 'pay').length} payments`, (add) => {
    for (const op of ops) {
      if (op.invoke.f !== 'pay' || op.complete?.outcome !== 'ok') continue;
      const o = orders.get(Number(op.invoke.args.orderId));
      if (!o) continue;
      if (o.status !== 'paid')
        add(`op ${op.invoke.op}: payment of order ${o.id} answered 200, the order ended ${o.status}`);
      else if (o.paidAt !== null && o.paidAt > o.expiresAt)
        add(
          `order ${o.id}: paid at ${new Date(o.paidAt).toISOString()}, after its end ${new Date(o.expiresAt).toISOString()}`,
        );
    }
    for (const o of snap.orders) {
      if (o.status === 'expired' && o.closedAt !== null && o.closedAt + SLACK_MS < o.expiresAt)
        add(
          `order ${o.id}: expired at ${new Date(o.closedAt).toISOString()}, before its end ${new Date(o.expiresAt).toISOString()}`,
        );
      if (o.status === 'reserved' && o.expiresAt < snap.takenAt - 10_000)
        add(`order ${o.id}: still reserved ${Math.round((snap.takenAt - o.expiresAt) / 1000)} s after its end`);
    }
  });

  run(
    'admissions (I8)',
    `orders of waiting-room products, ${(snap.admissionSteps ?? []).length} admission steps`,
    (add) => checkAdmissions(ops, snap, add),
  );
  run('queue places (v3)', `${snap.tickets.length} tickets`, (add) => checkQueue(ops, snap, add));
  run('event stream', `${input.followed.length} events followed over SSE`, (add) =>
    checkStream(input.followed, snap, add),
  );
  run('webhooks', `${input.deliveries.length} deliveries`, (add) => checkWebhooks(input.deliveries, snap, add));

  run('server errors (I5)', 'every answer', (add) => {
    for (const op of ops) {
      const c = op.complete;
      if (c && c.status >= 500 && c.status !== 503)
        add(`op ${op.invoke.op} ${op.invoke.f} on ${op.invoke.node}: ${c.status} ${c.code ?? ''}`);
    }
  });

  run('liveness', `after the last heal, within ${input.liveness.boundMs / 1000} s`, (add) => {
    for (const [s, ms] of Object.entries(input.liveness.healthyAfterMs))
      if (ms === null || ms > input.liveness.boundMs)
        add(`${s} answered GET /health ${ms === null ? 'never' : `after ${ms} ms`} after the last heal`);
    if (!input.liveness.soldOut) add('the sale did not sell out after the last heal');
    for (const p of snap.products) {
      const left = snap.segments.filter((s) => s.productId === p.id).reduce((a, s) => a + s.stock, 0);
      if (input.liveness.soldOut && left !== 0) add(`product ${p.id}: ${left} units left after the sell-out`);
    }
  });

  const unknownOrders = orderOps.filter((o) => o.complete?.outcome === 'unknown' || !o.complete);
  const tookEffect = unknownOrders.filter((o) => (attribution.byUnknownOp.get(o.invoke.op) ?? []).length > 0).length;
  return {
    anomalies: found,
    checks,
    unknown: {
      orders: { total: unknownOrders.length, tookEffect, didNot: unknownOrders.length - tookEffect },
      pays: ops.filter((o) => o.invoke.f === 'pay' && o.complete?.outcome === 'unknown').length,
      cancels: ops.filter((o) => o.invoke.f === 'cancel' && o.complete?.outcome === 'unknown').length,
    },
  };
}

/**
 * Which request made each order of PostgreSQL: the one answered 201 with its id; else a request of
 * the same user and product whose outcome is unknown and that was in flight when PostgreSQL made
 * the order (its created_at). An order that neither explains was made by a request answered with a
 * refusal or a failure, or by none.
 */
export function attribute(
  orderOps: Op[],
  snap: Snapshot,
): { byOrder: Map<number, number>; byUnknownOp: Map<number, number[]> } {
  const byOrder = new Map<number, number>();
  const byUnknownOp = new Map<number, number[]>();
  for (const op of orderOps)
    if (op.complete?.outcome === 'ok') byOrder.set(Number(op.complete.value?.id), op.invoke.op);
  // A request whose outcome the client never learnt may take effect at any moment after it was sent,
  // also after the client gave up: a statement held by a cut link reaches PostgreSQL when the
  // link heals, however long after the client's timeout.
  const open = orderOps.filter((o) => !o.complete || o.complete.outcome === 'unknown');
  for (const o of snap.orders) {
    if (byOrder.has(o.id)) continue;
    const candidates = open.filter(
      (op) =>
        op.invoke.args.userId === o.userId &&
        op.invoke.args.productId === o.productId &&
        op.invoke.at - SLACK_MS <= o.createdAt,
    );
    // The least used candidate first: two open requests and two orders are one each.
    candidates.sort(
      (a, b) => (byUnknownOp.get(a.invoke.op)?.length ?? 0) - (byUnknownOp.get(b.invoke.op)?.length ?? 0),
    );
    const op = candidates[0];
    if (!op) continue;
    byOrder.set(o.id, op.invoke.op);
    byUnknownOp.set(op.invoke.op, [...(byUnknownOp.get(op.invoke.op) ?? []), o.id]);
  }
  return { byOrder, byUnknownOp };
}

/** The state an answer shows an order in, and the final state it promises (a refusal names one). */
function observed(op: Op): { orderId: number; shows?: string; promises?: string } | null {
  const c = op.complete as Complete;
  const id = Number(op.invoke.args.orderId ?? c.value?.id);
  if (!Number.isFinite(id)) return null;
  if (c.outcome === 'ok') {
    const shows = typeof c.value?.status === 'string' ? c.value.status : '';
    return { orderId: id, shows, promises: TERMINAL.has(shows) ? shows : undefined };
  }
  if (c.outcome !== 'refused') return null;
  switch (c.code) {
    case 'ORDER_EXPIRED':
      // Past its end: it can only end expired (the sweep may not have run yet).
      return { orderId: id, promises: 'expired' };
    case 'ORDER_CANCELLED':
      return { orderId: id, shows: 'cancelled', promises: 'cancelled' };
    case 'ORDER_PAID':
      return { orderId: id, shows: 'paid', promises: 'paid' };
    default:
      return null;
  }
}

function checkStates(
  ops: Op[],
  orders: Map<number, Snapshot['orders'][number]>,
  snap: Snapshot,
  add: (m: string) => void,
): void {
  const seen = new Map<number, Array<{ op: Op; shows?: string; promises?: string }>>();
  for (const op of ops) {
    if (!op.complete || !['order', 'pay', 'cancel', 'read'].includes(op.invoke.f)) continue;
    const o = observed(op);
    if (!o) continue;
    seen.set(o.orderId, [...(seen.get(o.orderId) ?? []), { op, ...o }]);
  }
  for (const [id, list] of seen) {
    const order = orders.get(id);
    if (!order) {
      if (list.some((x) => x.shows)) add(`order ${id}: answered about, absent from PostgreSQL`);
      continue;
    }
    for (const x of list)
      if (x.promises && x.promises !== order.status)
        add(
          `order ${id}: op ${x.op.invoke.op} (${x.op.invoke.f}) said ${x.shows ?? x.op.complete?.code}, the order ended ${order.status}`,
        );
    // A terminal state, once answered, is what every answer to a request sent after it shows.
    for (const a of list) {
      if (!a.shows || !TERMINAL.has(a.shows)) continue;
      for (const b of list)
        if (b.shows && b.op.invoke.at > (a.op.complete as Complete).at && b.shows !== a.shows)
          add(
            `order ${id}: answered ${a.shows} (op ${a.op.invoke.op}), then ${b.shows} to a later request (op ${b.op.invoke.op})`,
          );
    }
  }
  // Every paid or cancelled order was asked to be (a payment or cancel answered 200 or left open).
  const asked = (f: string, id: number) =>
    ops.some(
      (op) =>
        op.invoke.f === f &&
        Number(op.invoke.args.orderId) === id &&
        op.complete?.outcome !== 'refused' &&
        op.complete?.outcome !== 'failed',
    );
  for (const o of snap.orders) {
    if (o.status === 'paid' && !asked('pay', o.id))
      add(`order ${o.id} ended paid with no payment answered 200 or left open`);
    if (o.status === 'cancelled' && !asked('cancel', o.id))
      add(`order ${o.id} ended cancelled with no cancel answered 200 or left open`);
  }
}

/**
 * Replays every event that moves units, in the order PostgreSQL committed their transactions,
 * segment by segment: a sale takes from the segments its allocations name, a return gives back to
 * the segments it names, a restock and a rebalance say what they left. No segment below zero on the
 * way, a rebalance finding what the replay holds, and the end equal to the segments' rows.
 */
function replaySegments(snap: Snapshot, add: (m: string) => void): void {
  const key = (c: string) => c.split('-').map((x) => BigInt(x));
  const events = [...snap.events].sort((a, b) => {
    if (a.committedUs !== b.committedUs) return (a.committedUs ?? 0) - (b.committedUs ?? 0);
    const [ax, ai] = key(a.cursor);
    const [bx, bi] = key(b.cursor);
    return ax !== bx ? (ax < bx ? -1 : 1) : ai < bi ? -1 : ai > bi ? 1 : 0;
  });
  if (events.some((e) => e.committedUs === null))
    add('events without a commit time (track_commit_timestamp off?): order not known');
  const state = new Map<number, Map<number, number>>();
  const asMap = (list: unknown) =>
    new Map((list as Array<{ index: number; stock: number }>).map((s) => [s.index, Number(s.stock)]));
  const show = (m: Map<number, number>) => JSON.stringify([...m.entries()].sort((a, b) => a[0] - b[0]));
  for (const e of events) {
    const d = e.data;
    const segs = state.get(e.productId);
    if (e.type === 'product.created') {
      const sizes = evenSplit(Number(d.stock), Number(d.segments));
      state.set(e.productId, new Map(sizes.map((s, i) => [i, s])));
      continue;
    }
    if (!segs) continue;
    const move = (idx: number, by: number) => {
      const now = (segs.get(idx) ?? NaN) + by;
      if (Number.isNaN(now)) add(`${e.type} ${e.cursor}: product ${e.productId} has no segment ${idx} in the replay`);
      else if (now < 0) add(`${e.type} ${e.cursor}: product ${e.productId} segment ${idx} would be at ${now}`);
      segs.set(idx, now);
    };
    if (e.type === 'order.reserved')
      for (const a of (d.allocations as Array<{ segment: number; quantity: number }>) ?? [])
        move(a.segment, -a.quantity);
    else if (e.type === 'units.returned')
      for (const s of (d.segments as Array<{ segment: number; units: number }>) ?? []) move(s.segment, s.units);
    else if (e.type === 'product.restocked') {
      const after = asMap(d.segments);
      const before = [...segs.values()].reduce((a, b) => a + b, 0);
      const total = [...after.values()].reduce((a, b) => a + b, 0);
      if (total - before !== Number(d.units))
        add(
          `restock ${e.cursor} of product ${e.productId}: ${total - before} units added by the segments, ${String(d.units)} said`,
        );
      for (const [i, s] of after) if (s < (segs.get(i) ?? 0)) add(`restock ${e.cursor}: segment ${i} went down`);
      state.set(e.productId, after);
    } else if (e.type === 'product.rebalanced') {
      const before = asMap(d.segmentsBefore);
      if (show(before) !== show(segs))
        add(`rebalance ${e.cursor} of product ${e.productId} found ${show(before)}, the replay holds ${show(segs)}`);
      const after = asMap(d.segments);
      const sum = (m: Map<number, number>) => [...m.values()].reduce((a, b) => a + b, 0);
      if (sum(after) !== sum(before))
        add(`rebalance ${e.cursor} of product ${e.productId}: ${sum(before)} units before, ${sum(after)} after`);
      state.set(e.productId, after);
    }
  }
  for (const p of snap.products) {
    const replayed = state.get(p.id);
    const actual = new Map(snap.segments.filter((s) => s.productId === p.id).map((s) => [s.idx, s.stock]));
    if (!replayed) add(`product ${p.id}: no product.created event`);
    else if (show(replayed) !== show(actual))
      add(`product ${p.id}: segments replayed from the events ${show(replayed)}, in PostgreSQL ${show(actual)}`);
  }
}

function checkAdmissions(ops: Op[], snap: Snapshot, add: (m: string) => void): void {
  const rooms = new Set(snap.products.filter((p) => p.waitingRoom).map((p) => p.id));
  const places = new Map(snap.tickets.map((t) => [`${t.productId}/${t.userId}`, t.position]));
  const spent = new Map<string, number[]>();
  for (const o of snap.orders) {
    if (!rooms.has(o.productId)) continue;
    if (o.admissionPosition === null) {
      add(`order ${o.id} of waiting-room product ${o.productId} was made without an admission`);
      continue;
    }
    const k = `${o.productId}/${o.admissionPosition}`;
    spent.set(k, [...(spent.get(k) ?? []), o.id]);
    const place = places.get(`${o.productId}/${o.userId}`);
    if (place !== o.admissionPosition)
      add(
        `order ${o.id}: spent the admission of position ${o.admissionPosition}, its user's ticket is at ${String(place)}`,
      );
  }
  for (const [k, ids] of spent)
    if (ids.length > 1) add(`admission ${k} spent ${ids.length} times: orders ${ids.join(', ')}`);
  // Admissions in queue order: each room's steps over consecutive places from 1, each made after
  // the one before it (PostgreSQL's clock). (Their ratio is the benchmark's check: the snapshot
  // does not hold the services' ADMISSION_RATIO.)
  for (const id of rooms) {
    const steps = (snap.admissionSteps ?? []).filter((s) => s.productId === id);
    for (const problem of admissionStepProblems(steps)) add(`product ${id}: admission ${problem}`);
  }
  for (const op of ops)
    if (
      op.invoke.f === 'order' &&
      rooms.has(Number(op.invoke.args.productId)) &&
      !op.invoke.args.admission &&
      op.complete?.outcome === 'ok'
    )
      add(`op ${op.invoke.op}: an order without an admission answered 201 on a waiting-room product`);
}

function checkQueue(ops: Op[], snap: Snapshot, add: (m: string) => void): void {
  const byProduct = new Map<number, number[]>();
  for (const t of snap.tickets)
    if (t.position !== null) byProduct.set(t.productId, [...(byProduct.get(t.productId) ?? []), t.position]);
  for (const [p, positions] of byProduct) {
    const sorted = [...positions].sort((a, b) => a - b);
    sorted.forEach((pos, i) => {
      if (pos !== i + 1)
        add(`product ${p}: the ${i + 1}th place is ${pos} (places are not 1..${sorted.length}, dense and unique)`);
    });
  }
  const final = new Map(snap.tickets.map((t) => [`${t.productId}/${t.userId}`, t.position]));
  const told = new Set<string>();
  for (const op of ops) {
    if ((op.invoke.f !== 'join' && op.invoke.f !== 'poll') || op.complete?.outcome !== 'ok') continue;
    const pos = op.complete.value?.position;
    if (typeof pos !== 'number') continue;
    const k = `${String(op.invoke.args.productId)}/${String(op.invoke.args.userId)}`;
    if (final.get(k) !== pos && !told.has(`${k}@${pos}`)) {
      told.add(`${k}@${pos}`);
      add(`${k} was told place ${pos} (op ${op.invoke.op}); its ticket ends at ${String(final.get(k))}`);
    }
  }
}

const sameEvent = (a: { type: string; productId: number | null; orderId: number | null; data: unknown }, b: typeof a) =>
  a.type === b.type &&
  a.productId === b.productId &&
  (a.orderId ?? null) === (b.orderId ?? null) &&
  JSON.stringify(a.data) === JSON.stringify(b.data);

function checkStream(followed: StreamEvent[], snap: Snapshot, add: (m: string) => void): void {
  const pg = new Map(snap.events.map((e) => [e.cursor, e]));
  const got = new Map<string, StreamEvent>();
  const key = (c: string) => c.split('-').map((x) => BigInt(x));
  let last: bigint[] | null = null;
  for (const e of followed) {
    const k = key(e.cursor);
    if (last && (k[0] < last[0] || (k[0] === last[0] && k[1] <= last[1])))
      add(`SSE: ${e.cursor} came after ${last.join('-')} (out of order or again)`);
    last = k;
    const prior = got.get(e.cursor);
    if (prior && !sameEvent(prior, e)) add(`SSE: ${e.cursor} came twice with different contents`);
    got.set(e.cursor, e);
    const mine = pg.get(e.cursor);
    if (!mine) add(`SSE: ${e.cursor} (${e.type}) is not in PostgreSQL`);
    else if (!sameEvent(mine, { ...e, orderId: e.orderId ?? null }))
      add(`SSE: ${e.cursor} differs from PostgreSQL's (${e.type} vs ${mine.type})`);
  }
  const missing = snap.events.filter((e) => !got.has(e.cursor));
  if (missing.length > 0)
    add(
      `SSE: ${missing.length} of ${snap.events.length} events never came (first ${missing[0].cursor} ${missing[0].type})`,
    );
  // The stream agrees with the orders: each order's last event is its state.
  const lastState = new Map<number, string>();
  for (const e of snap.events)
    if (e.type.startsWith('order.') && e.orderId !== null) lastState.set(e.orderId, e.type.slice(6));
  for (const o of snap.orders) {
    const s = lastState.get(o.id);
    if (s !== o.status) add(`order ${o.id} is ${o.status}; its last event says ${String(s)}`);
  }
}

function checkWebhooks(deliveries: Delivery[], snap: Snapshot, add: (m: string) => void): void {
  const pg = new Map(snap.events.map((e) => [e.cursor, e]));
  const acked = new Set<string>();
  const content = new Map<string, StreamEvent>();
  for (const d of deliveries) {
    if (!d.signed) add(`a delivery at ${new Date(d.at).toISOString()} was not signed with the secret`);
    for (const e of d.events) {
      const prior = content.get(e.cursor);
      if (prior && !sameEvent(prior, e)) add(`webhook: ${e.cursor} delivered twice with different contents`);
      content.set(e.cursor, e);
      const mine = pg.get(e.cursor);
      if (!mine) add(`webhook: ${e.cursor} (${e.type}) is not in PostgreSQL`);
      else if (!sameEvent(mine, { ...e, orderId: e.orderId ?? null }))
        add(`webhook: ${e.cursor} differs from PostgreSQL's`);
      if (d.status < 300) acked.add(e.cursor);
    }
  }
  const missing = snap.events.filter((e) => !acked.has(e.cursor));
  if (missing.length > 0)
    add(
      `webhook: ${missing.length} of ${snap.events.length} events never delivered (first ${missing[0].cursor} ${missing[0].type})`,
    );
  if (snap.deadLetters > 0) add(`webhook: ${snap.deadLetters} batches set aside as dead letters`);
}
