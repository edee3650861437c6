// Harness (see harness/README.md): the audit of a product from PostgreSQL, the source of truth,
// shared by the e2e specs (test/support/database.ts, test/faults/) and the benchmark's scenarios,
// so that a test and a benchmark run call the same thing a kept invariant.
//
// auditProduct reads stock, segments and live orders in one snapshot; verify() adds the answers a
// run saw and checks no oversell (I1), no user twice (I2), no false sold-out (I3), no 5xx. A
// benchmark scenario that breaks any of them is FAILED however fast it was.
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';

export interface Audit {
  /** Units ever stocked (created plus restocked). */
  totalStock: number;
  remaining: number;
  /** Units in live orders (reserved or paid). */
  ordered: number;
  /** Live orders. */
  orders: number;
  negativeSegments: number;
  /** Users holding more than one live order of the product. */
  duplicateUsers: number;
}

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

export interface Verification {
  verified: boolean;
  checks: Check[];
  /** null where nothing was sold (GET /health/live). */
  audit: Audit | null;
}

/**
 * One statement, so one snapshot: stock, segments and orders are read as of the same instant.
 * I1: remaining + units in live orders == units ever stocked (cancelled and expired orders gave
 * theirs back); I2: no user with two live orders.
 */
export async function auditProduct(db: Client, productId: number): Promise<Audit> {
  const { rows } = await db.query(
    `SELECT p.total_stock::bigint AS total_stock,
            (SELECT COALESCE(sum(stock), 0) FROM stock_segments WHERE product_id = p.id)::bigint AS remaining,
            (SELECT COALESCE(sum(quantity), 0) FROM orders WHERE product_id = p.id AND status IN ('reserved', 'paid'))::bigint AS ordered,
            (SELECT count(*) FROM orders WHERE product_id = p.id AND status IN ('reserved', 'paid'))::int AS orders,
            (SELECT count(*) FROM stock_segments WHERE product_id = p.id AND stock < 0)::int AS negative_segments,
            (SELECT count(*) FROM (
               SELECT user_id FROM orders WHERE product_id = p.id AND status IN ('reserved', 'paid') GROUP BY user_id HAVING count(*) > 1
             ) d)::int AS duplicate_users
       FROM products p WHERE p.id = $1`,
    [productId],
  );
  if (rows.length === 0) throw new Error(`product ${productId} is not in PostgreSQL`);
  const r = rows[0];
  return {
    totalStock: Number(r.total_stock),
    remaining: Number(r.remaining),
    ordered: Number(r.ordered),
    orders: r.orders,
    negativeSegments: r.negative_segments,
    duplicateUsers: r.duplicate_users,
  };
}

export async function orderCount(db: Client, productId: number): Promise<number> {
  const { rows } = await db.query('SELECT count(*)::int AS n FROM orders WHERE product_id = $1', [productId]);
  return rows[0].n;
}

/**
 * Waits until no order has landed for `quietMs`: requests abandoned when the load stopped are
 * still being served, and the next scenario must not share the machine with them.
 */
export async function waitQuiet(
  db: Client,
  productId: number,
  quietMs: number,
  capMs: number,
  signal?: AbortSignal,
): Promise<number> {
  const deadline = Date.now() + capMs;
  let last = await orderCount(db, productId);
  let stableSince = Date.now();
  while (Date.now() < deadline && !signal?.aborted) {
    await sleep(100);
    const n = await orderCount(db, productId);
    if (n !== last) {
      last = n;
      stableSince = Date.now();
    } else if (Date.now() - stableSince >= quietMs) break;
  }
  return last;
}

export interface Seen {
  statusCounts: Record<string, number>;
  created: number;
  /** For the sale: every buyer got an answer, so stock left with 410s given is a false sold-out. */
  allAnswered: boolean;
  /** The sale: the stock must be gone and exactly that many orders exist. */
  expectSoldOut: boolean;
}

export function verify(audit: Audit, seen: Seen): Verification {
  const checks: Check[] = [];
  const add = (name: string, ok: boolean, detail: string) => checks.push({ name, ok, detail });
  const count = (pred: (code: number) => boolean) =>
    Object.entries(seen.statusCounts)
      .filter(([c]) => pred(Number(c)))
      .reduce((s, [, n]) => s + n, 0);

  add(
    'I1 stock conserved',
    audit.ordered + audit.remaining === audit.totalStock,
    `ordered ${audit.ordered} + remaining ${audit.remaining} ${audit.ordered + audit.remaining === audit.totalStock ? '==' : '!='} stocked ${audit.totalStock}`,
  );
  add('I1 no segment below 0', audit.negativeSegments === 0, `${audit.negativeSegments} negative segment(s)`);
  add('I2 no user twice', audit.duplicateUsers === 0, `${audit.duplicateUsers} user(s) with more than one order`);
  const fivexx = count((c) => c >= 500);
  const detail5xx = Object.entries(seen.statusCounts)
    .filter(([c]) => Number(c) >= 500)
    .map(([c, n]) => `${c}x${n}`)
    .join(', ');
  add('no 5xx answers', fivexx === 0, fivexx === 0 ? 'none' : `${detail5xx} (503 = BUSY/UNAVAILABLE)`);
  // Every 201 the client saw must be an order in PostgreSQL; more orders than 201s is fine
  // (requests abandoned when the load stopped, answered after autocannon hung up).
  add(
    'every 201 is an order',
    seen.created <= audit.orders,
    `${seen.created} answered 201, ${audit.orders} orders stored`,
  );
  const sold410 = count((c) => c === 410);
  if (seen.expectSoldOut) {
    add(
      'sold out exactly',
      audit.remaining === 0 && audit.ordered === audit.totalStock,
      `${audit.orders} orders for ${audit.totalStock} units, ${audit.remaining} left`,
    );
    if (seen.allAnswered)
      add(
        'I3 no false sold-out',
        !(sold410 > 0 && audit.remaining > 0),
        `${sold410} answered 410 with ${audit.remaining} units left`,
      );
  } else {
    // Steady state stocks far more than can sell, so any 410 is a false sold-out.
    add(
      'I3 no false sold-out',
      sold410 === 0,
      sold410 === 0 ? 'no 410 while stock remained' : `${sold410} answered 410 with ${audit.remaining} units left`,
    );
  }
  return { verified: checks.every((c) => c.ok), checks, audit };
}
