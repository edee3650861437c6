// The checker on made-up runs: a run that broke nothing passes every check, and each kind of
// anomaly the checker exists to find, planted in an otherwise sound run, is found by its check
// (and by no other, where that can be told apart).
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { check, CheckInput, Liveness } from './checker';
import { Entry, History, OpName, Outcome } from './history';
import type { Delivery, StreamEvent } from './shop';
import type { Snapshot } from './snapshot';

const T0 = 1_800_000_000_000;
type Order = Snapshot['orders'][number];

/** A small sound run that sells out: product 1 (2 segments of 1, no room) and product 2 (1 segment of 1, a room). */
function run() {
  const entries: Entry[] = [];
  let op = 0;
  const events: Snapshot['events'] = [];
  let tx = 100;
  const event = (productId: number, type: string, data: Record<string, unknown>, orderId: number | null = null) => {
    tx++;
    events.push({
      cursor: `${tx}-${events.length + 1}`,
      productId,
      orderId,
      type,
      data,
      committedUs: (T0 + tx) * 1000,
    });
  };
  const call = (
    f: OpName,
    args: Record<string, unknown>,
    at: number,
    outcome: Outcome,
    extra: { status?: number; code?: string; error?: string; value?: Record<string, unknown>; ms?: number } = {},
  ) => {
    const id = ++op;
    entries.push({ type: 'invoke', op: id, t: at - T0, at, proc: 'buyer-0', f, node: 's0', args });
    const end = at + (extra.ms ?? 20);
    entries.push({
      type: 'complete',
      op: id,
      t: end - T0,
      at: end,
      proc: 'buyer-0',
      f,
      outcome,
      status: extra.status ?? (outcome === 'ok' ? 200 : 0),
      ...(extra.code ? { code: extra.code } : {}),
      ...(extra.error ? { error: extra.error } : {}),
      ...(extra.value ? { value: extra.value } : {}),
    });
    return id;
  };
  event(1, 'product.created', { stock: 2, segments: 2 });
  event(2, 'product.created', { stock: 1, segments: 1 });
  const orders: Order[] = [];
  const sell = (
    id: number,
    productId: number,
    userId: string,
    segment: number,
    at: number,
    position: number | null = null,
  ) => {
    const o: Order = {
      id,
      productId,
      userId,
      quantity: 1,
      allocations: [{ segment, quantity: 1 }],
      status: 'reserved',
      createdAt: at + 5,
      expiresAt: at + 5005,
      paidAt: null,
      closedAt: null,
      admissionPosition: position,
    };
    orders.push(o);
    call('order', { userId, productId, quantity: 1, admission: position !== null }, at, 'ok', {
      status: 201,
      value: { id, status: 'reserved', productId, userId, quantity: 1 },
    });
    event(productId, 'order.reserved', { id, status: 'reserved', allocations: o.allocations }, id);
    return o;
  };
  // u1 orders and pays; u2 orders and cancels; u3 orders and lets it expire; u4 orders after a place in the room.
  const a = sell(1, 1, 'u1', 0, T0 + 1000);
  call('pay', { orderId: 1, userId: 'u1' }, T0 + 1100, 'ok', { value: { id: 1, status: 'paid' } });
  a.status = 'paid';
  a.paidAt = T0 + 1105;
  event(1, 'order.paid', { id: 1, status: 'paid' }, 1);
  const b = sell(2, 1, 'u2', 1, T0 + 1200);
  call('cancel', { orderId: 2, userId: 'u2' }, T0 + 1300, 'ok', { value: { id: 2, status: 'cancelled' } });
  b.status = 'cancelled';
  b.closedAt = T0 + 1305;
  event(1, 'order.cancelled', { id: 2, status: 'cancelled' }, 2);
  event(1, 'units.returned', { segments: [{ segment: 1, units: 1 }] });
  const c = sell(3, 1, 'u3', 1, T0 + 1400);
  c.status = 'expired';
  c.closedAt = c.expiresAt + 300;
  event(1, 'order.expired', { id: 3, status: 'expired' }, 3);
  event(1, 'units.returned', { segments: [{ segment: 1, units: 1 }] });
  call('join', { userId: 'u4', productId: 2 }, T0 + 1500, 'ok', {
    status: 201,
    value: { status: 'admitted', position: 1 },
  });
  const d = sell(4, 2, 'u4', 0, T0 + 1600, 1);
  call('pay', { orderId: 4, userId: 'u4' }, T0 + 1650, 'ok', { value: { id: 4, status: 'paid' } });
  d.status = 'paid';
  d.paidAt = T0 + 1655;
  event(2, 'order.paid', { id: 4, status: 'paid' }, 4);
  // The last unit, after the expiry returned it.
  const e = sell(5, 1, 'u7', 1, T0 + 7000);
  call('pay', { orderId: 5, userId: 'u7' }, T0 + 7100, 'ok', { value: { id: 5, status: 'paid' } });
  e.status = 'paid';
  e.paidAt = T0 + 7105;
  event(1, 'order.paid', { id: 5, status: 'paid' }, 5);
  // A refused order and an order request whose outcome is unknown that did not take effect.
  call('order', { userId: 'u5', productId: 1, quantity: 1 }, T0 + 1700, 'refused', {
    status: 503,
    code: 'UNAVAILABLE',
  });
  call('order', { userId: 'u6', productId: 1, quantity: 1 }, T0 + 1800, 'unknown', { error: 'TIMEOUT' });
  const snapshot: Snapshot = {
    takenAt: T0 + 60_000,
    products: [
      { id: 1, totalStock: 2, segmentCount: 2, waitingRoom: false },
      { id: 2, totalStock: 1, segmentCount: 1, waitingRoom: true },
    ],
    segments: [
      { productId: 1, idx: 0, stock: 0, fence: 3 },
      { productId: 1, idx: 1, stock: 0, fence: 6 },
      { productId: 2, idx: 0, stock: 0, fence: 1 },
    ],
    orders,
    events,
    tickets: [{ productId: 2, userId: 'u4', position: 1 }],
    admissionSteps: [{ productId: 2, first: 1, last: 1, admittedAt: T0 + 900, unitsLeft: 1, outstandingBefore: 0 }],
    webhookMark: events[events.length - 1].cursor,
    deadLetters: 0,
  };
  const stream: StreamEvent[] = events.map((e) => ({ ...e, at: '' }));
  const deliveries: Delivery[] = [{ at: T0 + 2000, status: 200, signed: true, events: stream }];
  const liveness: Liveness = { healthyAfterMs: { s0: 12 }, boundMs: 10_000, soldOut: true, soldOutMs: 1000 };
  const input: CheckInput = { entries, snapshot, followed: [...stream], deliveries, liveness };
  return { input, call, event, orders, snapshot, entries };
}

const anomalies = (input: CheckInput) => check(input).anomalies;
const checksFailing = (input: CheckInput) => [...new Set(anomalies(input).map((a) => a.check))];

describe('the checker', () => {
  it('should find nothing in a sound run, and count an order request left unknown that took no effect', () => {
    const { input } = run();
    const report = check(input);
    expect(report.anomalies).toEqual([]);
    expect(report.checks.every((c) => c.anomalies === 0)).toBe(true);
    expect(report.unknown.orders).toEqual({ total: 1, tookEffect: 0, didNot: 1 });
  });

  it('should find a unit sold twice: a segment below zero and the books off (I1)', () => {
    const r = run();
    r.snapshot.segments[0].stock = -1;
    expect(checksFailing(r.input)).toEqual(expect.arrayContaining(['units (I1)', 'segments (I1, I4, I6)']));
  });

  it('should find a unit returned twice: more units than ever stocked (I1, I6)', () => {
    const r = run();
    r.snapshot.segments[1].stock += 1;
    r.event(1, 'units.returned', { segments: [{ segment: 1, units: 1 }] });
    r.input.followed = r.snapshot.events.map((e) => ({ ...e, at: '' }));
    r.input.deliveries[0].events = r.input.followed;
    expect(anomalies(r.input).map((a) => a.check)).toContain('units (I1)');
  });

  it('should find a sale recorded on another segment than the one it took from, though the books balance', () => {
    const r = run();
    // Order 5's unit came from segment 1 (PostgreSQL's rows); its event names segment 0.
    const reserved = r.snapshot.events.find((x) => x.orderId === 5 && x.type === 'order.reserved');
    (reserved as { data: Record<string, unknown> }).data.allocations = [{ segment: 0, quantity: 1 }];
    expect(checksFailing(r.input)).toEqual(['segments (I1, I4, I6)']);
  });

  it('should find two live orders of one user and product (I2)', () => {
    const r = run();
    r.orders.push({ ...r.orders[0], id: 9 });
    expect(checksFailing(r.input)).toContain('one live order per user and product (I2)');
  });

  it('should find an order answered 201 that PostgreSQL does not have (I7)', () => {
    const r = run();
    r.call('order', { userId: 'u7', productId: 1, quantity: 1 }, T0 + 1900, 'ok', {
      status: 201,
      value: { id: 77, status: 'reserved' },
    });
    expect(anomalies(r.input).some((a) => a.check === 'acknowledged orders (I7)' && /order 77/.test(a.message))).toBe(
      true,
    );
  });

  it('should find an order made by a request answered 503 UNAVAILABLE, which means nothing happened (I7)', () => {
    const r = run();
    r.orders.push({ ...r.orders[0], id: 8, userId: 'u5', status: 'reserved', paidAt: null, createdAt: T0 + 1710 });
    expect(anomalies(r.input).some((a) => /order 8 .*matches no order request/.test(a.message))).toBe(true);
  });

  it('should settle an order request left unknown that took effect, and find one request that made two orders', () => {
    const r = run();
    const made = {
      ...r.orders[0],
      id: 10,
      userId: 'u6',
      status: 'expired' as const,
      paidAt: null,
      createdAt: T0 + 1805,
    };
    r.orders.push(made);
    expect(check(r.input).unknown.orders).toEqual({ total: 1, tookEffect: 1, didNot: 0 });
    r.orders.push({ ...made, id: 11, createdAt: T0 + 1810 });
    expect(anomalies(r.input).some((a) => /one request, 2 orders/.test(a.message))).toBe(true);
  });

  it('should give an order made after its request timed out at the client to that request, and no order to a request sent after it was made', () => {
    const r = run();
    // The request of u6 timed out at the client at T0 + 1820; its statement, held by a cut link, commits later.
    r.orders.push({ ...r.orders[0], id: 12, userId: 'u6', status: 'expired', paidAt: null, createdAt: T0 + 9000 });
    const unmatched = (input: CheckInput) => anomalies(input).filter((a) => /matches no order request/.test(a.message));
    expect(unmatched(r.input)).toEqual([]);
    expect(check(r.input).unknown.orders).toEqual({ total: 1, tookEffect: 1, didNot: 0 });
    // An order of u6 made before its only request was sent is nobody's.
    r.orders[r.orders.length - 1] = { ...r.orders[r.orders.length - 1], createdAt: T0 + 1500 };
    expect(unmatched(r.input).map((a) => a.message)).toEqual([expect.stringMatching(/^order 12 /)]);
  });

  it('should find a payment answered 200 on an order that ended expired (I7)', () => {
    const r = run();
    r.call('pay', { orderId: 3, userId: 'u3' }, T0 + 1450, 'ok', { value: { id: 3, status: 'paid' } });
    expect(checksFailing(r.input)).toEqual(expect.arrayContaining(['payments (I7)', 'order states (I7)']));
  });

  it('should find an order that ended paid though no payment was asked, and a paid order seen reserved again later (I7)', () => {
    const r = run();
    r.orders[1].status = 'paid';
    r.call('read', { orderId: 1 }, T0 + 3000, 'ok', { value: { id: 1, status: 'reserved' } });
    const found = anomalies(r.input).map((a) => a.message);
    expect(found.some((m) => /order 2 ended paid with no payment/.test(m))).toBe(true);
    expect(found.some((m) => /order 1: answered paid .* then reserved to a later request/.test(m))).toBe(true);
  });

  it('should hold a refusal to the state it names: ORDER_EXPIRED on an order that ended paid (I7)', () => {
    const r = run();
    r.call('pay', { orderId: 1, userId: 'u1' }, T0 + 1200, 'refused', { status: 409, code: 'ORDER_EXPIRED' });
    expect(anomalies(r.input).some((a) => /said ORDER_EXPIRED, the order ended paid/.test(a.message))).toBe(true);
  });

  it('should find an admission spent twice, and an order of a room product without one (I8)', () => {
    const r = run();
    r.orders.push({ ...r.orders[3], id: 12, userId: 'u9', admissionPosition: 1 });
    r.orders.push({ ...r.orders[3], id: 13, userId: 'u8', admissionPosition: null });
    const found = anomalies(r.input)
      .filter((a) => a.check === 'admissions (I8)')
      .map((a) => a.message);
    expect(found.some((m) => /spent 2 times/.test(m))).toBe(true);
    expect(found.some((m) => /order 13 .* without an admission/.test(m))).toBe(true);
  });

  it('should find admission steps out of queue order: one dated before the step it follows, one leaving a gap (I8)', () => {
    const r = run();
    const steps = r.snapshot.admissionSteps!;
    steps.push({ ...steps[0], first: 2, last: 3, admittedAt: T0 + 850 });
    steps.push({ ...steps[0], first: 5, last: 5, admittedAt: T0 + 1000 });
    const found = anomalies(r.input)
      .filter((a) => a.check === 'admissions (I8)')
      .map((a) => a.message);
    expect(found).toEqual([
      'product 2: admission step 2 (places 2-3) is dated 50 ms before the step it follows',
      'product 2: admission step 3 (places 5-5) starts at 5, not 4',
    ]);
  });

  it('should find queue places that are not 1..N, and a place told that the ticket did not keep', () => {
    const r = run();
    r.snapshot.tickets.push({ productId: 2, userId: 'u9', position: 3 });
    r.call('poll', { userId: 'u4', productId: 2 }, T0 + 1550, 'ok', { value: { status: 'waiting', position: 2 } });
    const found = anomalies(r.input)
      .filter((a) => a.check === 'queue places (v3)')
      .map((a) => a.message);
    expect(found.some((m) => /not 1\.\.2/.test(m))).toBe(true);
    expect(found.some((m) => /told place 2/.test(m))).toBe(true);
  });

  it('should find an event the SSE stream skipped, one it sent out of order, and one the webhook never delivered', () => {
    const r = run();
    const [first, second, ...rest] = r.input.followed;
    r.input.followed = [second, first, ...rest.slice(1)];
    r.input.deliveries[0].events = r.input.deliveries[0].events.slice(0, -1);
    const found = anomalies(r.input).map((a) => `${a.check}: ${a.message}`);
    expect(found.some((m) => /event stream: SSE: .* came after/.test(m))).toBe(true);
    expect(found.some((m) => /event stream: SSE: 1 of \d+ events never came/.test(m))).toBe(true);
    expect(found.some((m) => /webhooks: webhook: 1 of \d+ events never delivered/.test(m))).toBe(true);
  });

  it('should find an event delivered twice with different contents (an id that is not stable)', () => {
    const r = run();
    const again = { ...r.input.deliveries[0].events[2], data: { id: 1, status: 'reserved', allocations: [] } };
    r.input.deliveries.push({ at: T0 + 3000, status: 503, signed: true, events: [again] });
    expect(anomalies(r.input).some((a) => /delivered twice with different contents/.test(a.message))).toBe(true);
  });

  it('should find an order whose last event is not its state in PostgreSQL (the stream disagrees)', () => {
    const r = run();
    r.orders[0].status = 'cancelled';
    expect(anomalies(r.input).some((a) => /order 1 is cancelled; its last event says paid/.test(a.message))).toBe(true);
  });

  it('should find a 500, a service slow to answer after the last heal, and a sale that did not sell out', () => {
    const r = run();
    r.call('order', { userId: 'u9', productId: 1, quantity: 1 }, T0 + 2000, 'unknown', {
      status: 500,
      code: 'INTERNAL',
    });
    r.input.liveness = {
      healthyAfterMs: { s0: 12, s1: 15_000, s2: null },
      boundMs: 10_000,
      soldOut: false,
      soldOutMs: null,
    };
    const found = anomalies(r.input).map((a) => `${a.check}: ${a.message}`);
    expect(found.filter((m) => m.startsWith('server errors'))).toHaveLength(1);
    expect(found.filter((m) => m.startsWith('liveness'))).toEqual([
      'liveness: s1 answered GET /health after 15000 ms after the last heal',
      'liveness: s2 answered GET /health never after the last heal',
      'liveness: the sale did not sell out after the last heal',
    ]);
  });

  it('should read back a history written to a file as it was recorded', () => {
    const r = run();
    const file = join(tmpdir(), `nemesis-history-${process.pid}.jsonl`);
    const h = new History(file);
    const inv = h.invoke('buyer-1', 'order', 's1', { userId: 'u1', productId: 1, quantity: 1 });
    h.complete(inv, { outcome: 'refused', status: 410, code: 'SOLD_OUT' });
    return h.close().then(() => {
      expect(History.read(file)).toEqual(h.entries);
      expect(r.entries.length).toBeGreaterThan(0);
    });
  });
});
