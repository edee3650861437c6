// PostgreSQL's state at the end of a run, read once after the quiet period and kept as JSON beside
// the history: the checker reads only these two (and what the shop received), so a run can be
// checked again without its world.
import { Client } from 'pg';
import type { AdmissionStep } from '../harness/queue-order';

export interface Snapshot {
  /** When it was read (ms since the epoch, PostgreSQL's clock). */
  takenAt: number;
  products: Array<{ id: number; totalStock: number; segmentCount: number; waitingRoom: boolean }>;
  segments: Array<{ productId: number; idx: number; stock: number; fence: number }>;
  orders: Array<{
    id: number;
    productId: number;
    userId: string;
    quantity: number;
    allocations: Array<{ segment: number; quantity: number }>;
    status: 'reserved' | 'paid' | 'cancelled' | 'expired';
    createdAt: number;
    expiresAt: number;
    paidAt: number | null;
    closedAt: number | null;
    admissionPosition: number | null;
  }>;
  /** Every event, in stream order, with the commit time of its transaction. */
  events: Array<{
    cursor: string;
    productId: number;
    orderId: number | null;
    type: string;
    data: Record<string, unknown>;
    /** When its transaction committed, in microseconds since the epoch (null without track_commit_timestamp). */
    committedUs: number | null;
  }>;
  /** Queue places: whatever else the ticket table holds, a ticket is its product, user and position. */
  tickets: Array<{ productId: number; userId: string; position: number | null }>;
  /** The waiting rooms' admission steps, by product and first place (absent in snapshots made before they were read). */
  admissionSteps?: Array<AdmissionStep & { productId: number }>;
  webhookMark: string | null;
  deadLetters: number;
}

const ms = (d: Date | null) => (d === null ? null : d.getTime());

export async function takeSnapshot(url: string): Promise<Snapshot> {
  const db = new Client({ connectionString: url });
  await db.connect();
  try {
    await db.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const [now] = (await db.query('SELECT now() AS now')).rows as Array<{ now: Date }>;
    const products = (
      await db.query('SELECT id, total_stock::bigint AS total, segment_count, waiting_room FROM products ORDER BY id')
    ).rows.map((r: any) => ({
      id: r.id as number,
      totalStock: Number(r.total),
      segmentCount: r.segment_count as number,
      waitingRoom: r.waiting_room as boolean,
    }));
    const segments = (
      await db.query('SELECT product_id, idx, stock, fence FROM stock_segments ORDER BY product_id, idx')
    ).rows.map((r: any) => ({
      productId: r.product_id as number,
      idx: r.idx as number,
      stock: Number(r.stock),
      fence: Number(r.fence),
    }));
    const orders = (
      await db.query(
        `SELECT id, product_id, user_id, quantity, allocations, status, created_at, expires_at, paid_at, closed_at,
                admission_position FROM orders ORDER BY id`,
      )
    ).rows.map((r: any) => ({
      id: Number(r.id),
      productId: r.product_id as number,
      userId: r.user_id as string,
      quantity: r.quantity as number,
      allocations: r.allocations as Array<{ segment: number; quantity: number }>,
      status: r.status,
      createdAt: r.created_at.getTime() as number,
      expiresAt: r.expires_at.getTime() as number,
      paidAt: ms(r.paid_at),
      closedAt: ms(r.closed_at),
      admissionPosition: r.admission_position === null ? null : Number(r.admission_position),
    }));
    const events = (
      await db.query(
        `SELECT tx::text AS tx, id::text AS id, product_id, order_id, type, data,
                (extract(epoch FROM pg_xact_commit_timestamp(xid(tx))) * 1000000)::bigint::text AS committed_us
           FROM order_events ORDER BY order_events.tx, order_events.id`,
      )
    ).rows.map((r: any) => ({
      cursor: `${r.tx}-${r.id}`,
      productId: r.product_id as number,
      orderId: r.order_id === null ? null : Number(r.order_id),
      type: r.type as string,
      data: r.data as Record<string, unknown>,
      committedUs: r.committed_us === null ? null : Number(r.committed_us),
    }));
    // A ticket's place comes from its bucket's draw (queue_places), not from a column of its row.
    const tickets = (
      await db.query(
        `SELECT t.product_id, t.user_id, p.position
           FROM queue_tickets t
           LEFT JOIN (SELECT r.product_id, q.user_id, q.position FROM waiting_rooms r, queue_places(r.product_id) q) p
             ON p.product_id = t.product_id AND p.user_id = t.user_id
          ORDER BY t.product_id, p.position`,
      )
    ).rows.map((r: any) => ({
      productId: r.product_id as number,
      userId: r.user_id as string,
      position: r.position === null ? null : Number(r.position),
    }));
    const admissionSteps = (
      await db.query(
        `SELECT product_id, first_position::text AS first, last_position::text AS last, admitted_at, units_left,
                outstanding_before
           FROM admission_batches ORDER BY product_id, first_position`,
      )
    ).rows.map((r: any) => ({
      productId: r.product_id as number,
      first: Number(r.first),
      last: Number(r.last),
      admittedAt: r.admitted_at.getTime() as number,
      unitsLeft: r.units_left as number,
      outstandingBefore: r.outstanding_before as number,
    }));
    const mark = (await db.query(`SELECT tx::text AS tx, id::text AS id FROM event_marks WHERE name = 'webhook'`))
      .rows[0] as { tx: string; id: string } | undefined;
    const [dead] = (await db.query('SELECT count(*)::int AS n FROM webhook_dead_letters')).rows as Array<{ n: number }>;
    await db.query('COMMIT');
    return {
      takenAt: now.now.getTime(),
      products,
      segments,
      orders,
      events,
      tickets,
      admissionSteps,
      webhookMark: mark ? `${mark.tx}-${mark.id}` : null,
      deadLetters: dead.n,
    };
  } finally {
    await db.end();
  }
}
