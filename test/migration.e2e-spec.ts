// The lifecycle migration on a database that already has orders: orders taken before it were
// final, so they become `paid` (and keep counting as their user's live order); the unique key
// becomes the partial index over live orders; and it can be reverted while no user has ordered
// twice. Then the waiting-room and the order-events migrations on top of it, and back. Runs on a
// database of its own in the test run's PostgreSQL.
import { DataSource } from 'typeorm';
import { dataSourceOptions } from '../src/infrastructure/data-source';
import { runMigrations } from '../src/infrastructure/migrate';
import { InitialSchema1763700000000 } from '../migrations/1763700000000-InitialSchema';
import { OrderLifecycle1763900000000 } from '../migrations/1763900000000-OrderLifecycle';
import { WaitingRoom1764000000000 } from '../migrations/1764000000000-WaitingRoom';
import { OrderEvents1764100000000 } from '../migrations/1764100000000-OrderEvents';
import { QueueInPostgres1764200000000 } from '../migrations/1764200000000-QueueInPostgres';
import { ProofOfWork1764250000000 } from '../migrations/1764250000000-ProofOfWork';
import { SoldOutAfterCause1764300000000 } from '../migrations/1764300000000-SoldOutAfterCause';
import { QueueJoinLookups1764350000000 } from '../migrations/1764350000000-QueueJoinLookups';
import { AdmissionPause1764400000000 } from '../migrations/1764400000000-AdmissionPause';
import { PreQueueCount1764450000000 } from '../migrations/1764450000000-PreQueueCount';
import { SegmentFencing1764470000000 } from '../migrations/1764470000000-SegmentFencing';
import { QueueBuckets1764500000000 } from '../migrations/1764500000000-QueueBuckets';
import { QueueJoinMade1764550000000 } from '../migrations/1764550000000-QueueJoinMade';
import { QueueSealEnded1764600000000 } from '../migrations/1764600000000-QueueSealEnded';
import { withPg } from './faults/support';
import { testUrls } from './support/service';

const DATABASE = 'flashsale_migration_test';

function urlOf(database: string): string {
  const url = new URL(testUrls().databaseUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

/** Applies only the given migrations, in order. */
async function migrateWith(url: string, migrations: Array<new () => unknown>): Promise<DataSource> {
  const ds = new DataSource({ ...dataSourceOptions(url, { poolSize: 1 }), migrations: migrations as never });
  await ds.initialize();
  await ds.runMigrations({ transaction: 'each' });
  return ds;
}

describe('the order lifecycle migration', () => {
  const url = urlOf(DATABASE);

  beforeAll(async () => {
    await withPg(testUrls().databaseUrl, async (db) => {
      await db.query(`DROP DATABASE IF EXISTS ${DATABASE}`);
      await db.query(`CREATE DATABASE ${DATABASE}`);
    });
  });
  afterAll(async () => {
    await withPg(testUrls().databaseUrl, (db) => db.query(`DROP DATABASE IF EXISTS ${DATABASE} WITH (FORCE)`));
  });

  it('should make the orders taken before it paid, keep them live, and move one order per user to the partial index', async () => {
    const ds = await migrateWith(url, [InitialSchema1763700000000]);
    await ds.destroy();
    await withPg(url, async (db) => {
      await db.query(`INSERT INTO products (name, total_stock, segment_count) VALUES ('old sale', 10, 2)`);
      await db.query(`INSERT INTO stock_segments (product_id, idx, stock) VALUES (1, 0, 4), (1, 1, 4)`);
      await db.query(`
        INSERT INTO orders (product_id, user_id, quantity, allocations, created_at) VALUES
          (1, 'ann', 1, '[{"segment":0,"quantity":1}]', '2026-01-01T10:00:00Z'),
          (1, 'bob', 1, '[{"segment":1,"quantity":1}]', '2026-01-01T10:00:01Z')`);
    });

    expect(await runMigrations(url)).toEqual([
      'OrderLifecycle1763900000000',
      'WaitingRoom1764000000000',
      'OrderEvents1764100000000',
      'QueueInPostgres1764200000000',
      'ProofOfWork1764250000000',
      'SoldOutAfterCause1764300000000',
      'QueueJoinLookups1764350000000',
      'AdmissionPause1764400000000',
      'PreQueueCount1764450000000',
      'SegmentFencing1764470000000',
      'QueueBuckets1764500000000',
      'QueueJoinMade1764550000000',
      'QueueSealEnded1764600000000',
    ]);

    await withPg(url, async (db) => {
      const orders = await db.query(
        `SELECT user_id, status, paid_at = created_at AS paid_when_taken, expires_at = created_at AS expired_when_taken, closed_at FROM orders ORDER BY id`,
      );
      expect(orders.rows).toEqual([
        { user_id: 'ann', status: 'paid', paid_when_taken: true, expired_when_taken: true, closed_at: null },
        { user_id: 'bob', status: 'paid', paid_when_taken: true, expired_when_taken: true, closed_at: null },
      ]);
      const product = await db.query('SELECT starts_at, ends_at, payment_timeout_s FROM products');
      expect(product.rows).toEqual([{ starts_at: null, ends_at: null, payment_timeout_s: 900 }]);
      // A paid order is live: its user still cannot hold a second one.
      await expect(
        db.query(
          `INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at) VALUES (1, 'ann', 1, '[]', 'reserved', now())`,
        ),
      ).rejects.toMatchObject({ code: '23505', constraint: 'orders_one_live_per_user' });
      // A closed order is not: after a cancelled one, the same user may reserve again.
      await db.query(
        `INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at, closed_at) VALUES (1, 'cy', 1, '[]', 'cancelled', now(), now())`,
      );
      await db.query(
        `INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at) VALUES (1, 'cy', 1, '[]', 'reserved', now())`,
      );
      // A state and its times go together.
      await expect(
        db.query(`UPDATE orders SET status = 'paid' WHERE user_id = 'cy' AND status = 'reserved'`),
      ).rejects.toMatchObject({ code: '23514' });
    });
  });

  it("should keep products and orders as they were under the waiting-room migration, spend an admission once, write each change's event with it under the events migration, and go back", async () => {
    const before = [
      InitialSchema1763700000000,
      OrderLifecycle1763900000000,
      WaitingRoom1764000000000,
      OrderEvents1764100000000,
      QueueInPostgres1764200000000,
      ProofOfWork1764250000000,
      SoldOutAfterCause1764300000000,
      QueueJoinLookups1764350000000,
      AdmissionPause1764400000000,
      PreQueueCount1764450000000,
      SegmentFencing1764470000000,
    ];
    // The queue's buckets and the join and seal after them (their own spec, test/queue-sql.e2e-spec.ts, covers their way there and back): gone.
    const all = await migrateWith(url, [
      ...before,
      QueueBuckets1764500000000,
      QueueJoinMade1764550000000,
      QueueSealEnded1764600000000,
    ]);
    try {
      await all.undoLastMigration({ transaction: 'each' });
      await all.undoLastMigration({ transaction: 'each' });
      await all.undoLastMigration({ transaction: 'each' });
    } finally {
      await all.destroy();
    }
    const ds = await migrateWith(url, before);
    try {
      const bucketTables = await withPg(url, (db) =>
        db.query(
          `SELECT table_name FROM information_schema.tables WHERE table_name IN ('queue_draws', 'queue_chains')`,
        ),
      );
      expect(bucketTables.rows).toEqual([]);
      // The pre-queue's count: made from the tickets a room already holds, then kept by each group
      // of joins (a user with a ticket is not counted again; an arrival is not in the pre-queue),
      // reset with a room made again, and gone on the way back.
      const counts = () =>
        withPg(
          url,
          async (db) => (await db.query('SELECT pre_joined::int AS pre, arrivals::int FROM queue_counts')).rows,
        );
      const joinAs = (users: string[], arrival = false) =>
        withPg(url, (db) =>
          db.query('SELECT count(*) FROM queue_join(1, $3, $1, $1, $2)', [
            users,
            users.map(() => Buffer.alloc(1)),
            arrival,
          ]),
        );
      const room = (sql: string) => withPg(url, (db) => db.query(sql));
      // Back past the fencing migration to before the count, so that the count is made from tickets.
      await ds.undoLastMigration({ transaction: 'each' });
      await ds.undoLastMigration({ transaction: 'each' });
      await room(`INSERT INTO waiting_rooms (product_id, seed, seed_hash) VALUES (1, '\\x00', repeat('0', 64))`);
      await joinAs(['pa', 'pb', 'pc']);
      await ds.runMigrations({ transaction: 'each' });
      expect(await counts()).toEqual([{ pre: 3, arrivals: 0 }]);
      await joinAs(['pa', 'pd', 'pe']);
      expect(await counts()).toEqual([{ pre: 5, arrivals: 0 }]);
      await joinAs(['pf'], true);
      expect(await counts()).toEqual([{ pre: 5, arrivals: 1 }]);
      await room('DELETE FROM waiting_rooms');
      await room(`INSERT INTO waiting_rooms (product_id, seed, seed_hash) VALUES (1, '\\x00', repeat('0', 64))`);
      expect(await counts()).toEqual([{ pre: 0, arrivals: 0 }]);
      // The segments' fencing tokens: a column and the trigger that refuses a stale one, and back.
      const fencing = () =>
        withPg(url, async (db) => ({
          column: (
            await db.query(
              `SELECT column_default FROM information_schema.columns WHERE table_name = 'stock_segments' AND column_name = 'fence'`,
            )
          ).rows,
          trigger: (await db.query(`SELECT tgname FROM pg_trigger WHERE tgname = 'stock_segments_fence'`)).rows,
        }));
      expect(await fencing()).toEqual({
        column: [{ column_default: '0' }],
        trigger: [{ tgname: 'stock_segments_fence' }],
      });
      await expect(
        withPg(url, (db) => db.query('UPDATE stock_segments SET fence = -1 WHERE product_id = 1')),
      ).rejects.toMatchObject({ code: 'FENCE' });
      await ds.undoLastMigration({ transaction: 'each' });
      expect(await fencing()).toEqual({ column: [], trigger: [] });
      await ds.undoLastMigration({ transaction: 'each' });
      const column = await withPg(url, (db) =>
        db.query(
          `SELECT 1 FROM information_schema.columns WHERE table_name = 'queue_counts' AND column_name = 'pre_joined'`,
        ),
      );
      expect(column.rows).toEqual([]);
      await joinAs(['pg']);
      await room('DELETE FROM waiting_rooms');
      await room('DELETE FROM queue_tickets');
      // The admission clocks' pause: one column of the room's row, and back.
      const pauseColumn = () =>
        withPg(url, async (db) => {
          const r = await db.query(
            `SELECT data_type FROM information_schema.columns WHERE table_name = 'waiting_rooms' AND column_name = 'paused_since'`,
          );
          return r.rows.map((c: { data_type: string }) => c.data_type);
        });
      expect(await pauseColumn()).toEqual(['timestamp with time zone']);
      await ds.undoLastMigration({ transaction: 'each' });
      expect(await pauseColumn()).toEqual([]);
      // A join looks up only its own users, however many tickets the queue already holds: with
      // statistics that have not caught up with a queue that filled fast, PostgreSQL had planned
      // joins that read every ticket of the product on each call.
      await withPg(url, async (db) => {
        await db.query(`INSERT INTO waiting_rooms (product_id, seed, seed_hash) VALUES (1, '\\x00', repeat('0', 64))`);
        const join = (users: string[]) =>
          db.query(`SELECT count(*)::int AS n FROM queue_join(1, true, $1, $1, $2)`, [
            users,
            users.map(() => Buffer.alloc(1)),
          ]);
        const crowd = Array.from({ length: 20_000 }, (_, i) => `crowd-${i}`);
        for (let i = 0; i < crowd.length; i += 2_000) await join(crowd.slice(i, i + 2_000));
        const ticketsRead = async () => {
          await db.query('SELECT pg_stat_force_next_flush()');
          await db.query('SELECT pg_stat_clear_snapshot()');
          const r = await db.query(
            `SELECT (COALESCE(idx_tup_fetch, 0) + seq_tup_read)::int AS n FROM pg_stat_user_tables WHERE relname = 'queue_tickets'`,
          );
          return r.rows[0].n as number;
        };
        // Group after group, as a crowd sends them (the function's plans are made once per session).
        let read = 0;
        for (let g = 0; g < 8; g++) {
          const group = [...crowd.slice(g * 50, g * 50 + 50), ...Array.from({ length: 50 }, (_, i) => `new-${g}-${i}`)];
          const before = await ticketsRead();
          expect((await join(group)).rows[0].n).toBe(100);
          read = Math.max(read, (await ticketsRead()) - before);
        }
        // Each of the 100 users is looked up a few times (before the insert, for the answer).
        expect(read).toBeLessThan(1_000);
        await db.query('DELETE FROM waiting_rooms');
        await db.query('DELETE FROM queue_tickets');
      });
      await ds.undoLastMigration({ transaction: 'each' });
      await withPg(url, async (db) => {
        const source = await db.query(`SELECT prosrc FROM pg_proc WHERE proname = 'queue_join'`);
        expect(source.rows).toHaveLength(1);
        expect(source.rows[0].prosrc).toContain('WHERE NOT EXISTS');
      });
      await withPg(url, async (db) => {
        expect((await db.query('SELECT waiting_room, admission_ttl_s FROM products')).rows).toEqual([
          { waiting_room: false, admission_ttl_s: 120 },
        ]);
        // The proof-of-work migration: off, and no shop URL, for the products made before it.
        expect((await db.query('SELECT proof_of_work, continue_url FROM products')).rows).toEqual([
          { proof_of_work: false, continue_url: null },
        ]);
        expect((await db.query('SELECT DISTINCT admission_position FROM orders')).rows).toEqual([
          { admission_position: null },
        ]);
        const spend = (user: string, position: number | null) =>
          db.query(
            `INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at, admission_position)
             VALUES (1, $1, 1, '[]', 'reserved', now(), $2)`,
            [user, position],
          );
        // Many orders without an admission; an admission spent once only.
        await spend('nq-1', null);
        await spend('nq-2', null);
        await spend('q-1', 7);
        await expect(spend('q-2', 7)).rejects.toMatchObject({ code: '23505', constraint: 'orders_admission_spent' });
        await db.query(`DELETE FROM orders WHERE user_id IN ('nq-1', 'nq-2', 'q-1')`);
      });
      // The outbox: each order change and a product's last unit write their events in the statement
      // that makes them, and nothing is written for an UPDATE that changes no status.
      await withPg(url, async (db) => {
        await db.query('TRUNCATE order_events');
        await db.query(`UPDATE stock_segments SET stock = 1 WHERE product_id = 1`);
        await db.query(
          `INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at)
           VALUES (1, 'ev', 1, '[]', 'reserved', now() + interval '1 hour')`,
        );
        await db.query(`UPDATE orders SET expires_at = expires_at WHERE user_id = 'ev'`);
        await db.query(`UPDATE orders SET status = 'paid', paid_at = now() WHERE user_id = 'ev'`);
        await db.query(`UPDATE stock_segments SET stock = 0 WHERE product_id = 1 AND idx = 0`);
        await db.query(`UPDATE stock_segments SET stock = 0 WHERE product_id = 1 AND idx = 1`);
        const events = await db.query(
          `SELECT type, data->>'status' AS status, data->>'userId' AS user_id FROM order_events ORDER BY tx, id`,
        );
        expect(events.rows).toEqual([
          { type: 'order.reserved', status: 'reserved', user_id: 'ev' },
          { type: 'order.paid', status: 'paid', user_id: 'ev' },
          { type: 'product.sold_out', status: null, user_id: null },
        ]);
        await db.query(`DELETE FROM orders WHERE user_id = 'ev'`);
      });
      // The sell-out after its cause: one statement that takes the last unit and inserts the order
      // (the segment first, as the sale does) reads order.reserved, then product.sold_out; a
      // transaction that empties two segments writes one product.sold_out.
      await withPg(url, async (db) => {
        await db.query('TRUNCATE order_events');
        await db.query(`UPDATE stock_segments SET stock = 1 WHERE product_id = 1`);
        await db.query(`UPDATE stock_segments SET stock = 0 WHERE product_id = 1 AND idx = 1`);
        await db.query(
          `WITH seg AS (UPDATE stock_segments SET stock = 0 WHERE product_id = 1 AND idx = 0 RETURNING product_id)
           INSERT INTO orders (product_id, user_id, quantity, allocations, status, expires_at)
           SELECT product_id, 'last', 1, '[]', 'reserved', now() + interval '1 hour' FROM seg`,
        );
        await db.query('BEGIN');
        await db.query(`UPDATE stock_segments SET stock = 1 WHERE product_id = 1`);
        await db.query(`UPDATE stock_segments SET stock = 0 WHERE product_id = 1 AND idx = 0`);
        await db.query(`UPDATE stock_segments SET stock = 0 WHERE product_id = 1 AND idx = 1`);
        await db.query('COMMIT');
        const events = await db.query(`SELECT type, tx::text FROM order_events ORDER BY tx, id`);
        expect(events.rows.map((r: { type: string }) => r.type)).toEqual([
          'order.reserved',
          'product.sold_out',
          'product.sold_out',
        ]);
        expect(events.rows[0].tx).toBe(events.rows[1].tx);
        expect(events.rows[1].tx).not.toBe(events.rows[2].tx);
        await db.query(`DELETE FROM orders WHERE user_id = 'last'`);
      });
      await ds.undoLastMigration({ transaction: 'each' });
      await withPg(url, async (db) => {
        const triggers = await db.query(`SELECT tgname FROM pg_trigger WHERE tgrelid = 'stock_segments'::regclass`);
        expect(triggers.rows.map((r: { tgname: string }) => r.tgname)).toContain('product_events_on_segments');
        expect(triggers.rows.map((r: { tgname: string }) => r.tgname)).not.toContain('product_sold_out_at_commit');
      });
      await ds.undoLastMigration({ transaction: 'each' });
      await withPg(url, async (db) => {
        const left = await db.query(
          `SELECT column_name FROM information_schema.columns WHERE table_name = 'products' AND column_name IN ('proof_of_work', 'continue_url')`,
        );
        expect(left.rows).toEqual([]);
      });
      // The queue in PostgreSQL: a room made before it gets its counter row; joins number in the
      // order given, one ticket per user, the draw ranks the pre-queue by lottery key; and back.
      await withPg(url, async (db) => {
        await db.query(`INSERT INTO waiting_rooms (product_id, seed, seed_hash) VALUES (1, '\\x00', repeat('0', 64))`);
        const join = async (arrival: boolean, users: string[]) =>
          (
            await db.query(`SELECT user_id, kind, position::int, created FROM queue_join(1, $1, $2, $3, $4)`, [
              arrival,
              users,
              users,
              users.map((u) => Buffer.from(u === 'p2' ? '01' : '02', 'hex')),
            ])
          ).rows;
        expect(await join(false, ['p1', 'p2', 'p1'])).toEqual([
          { user_id: 'p1', kind: 'p', position: null, created: true },
          { user_id: 'p2', kind: 'p', position: null, created: true },
          { user_id: 'p1', kind: 'p', position: null, created: false },
        ]);
        // The first arrival draws: p2's key is the smaller, so it is first.
        expect(await join(true, ['a1', 'p1'])).toEqual([
          { user_id: 'a1', kind: 'a', position: 3, created: true },
          { user_id: 'p1', kind: 'p', position: 2, created: false },
        ]);
        expect(await join(false, ['late'])).toEqual([{ user_id: 'late', kind: 'a', position: 4, created: true }]);
        expect((await db.query('SELECT pre_queue, arrivals::int FROM queue_counts')).rows).toEqual([
          { pre_queue: 2, arrivals: 2 },
        ]);
        await db.query('DELETE FROM waiting_rooms');
      });
      await ds.undoLastMigration({ transaction: 'each' });
      await withPg(url, async (db) => {
        const left = await db.query(
          `SELECT table_name FROM information_schema.tables WHERE table_name IN ('queue_tickets', 'queue_counts')`,
        );
        expect(left.rows).toEqual([]);
        const columns = await db.query(
          `SELECT column_name FROM information_schema.columns WHERE table_name = 'waiting_rooms' AND column_name IN ('epoch', 'position_base')`,
        );
        expect(columns.rows).toHaveLength(2);
      });
      await ds.undoLastMigration({ transaction: 'each' });
      await withPg(url, async (db) => {
        const left = await db.query(
          `SELECT table_name FROM information_schema.tables WHERE table_name IN ('order_events', 'event_marks', 'webhook_dead_letters')`,
        );
        expect(left.rows).toEqual([]);
        const triggers = await db.query(`SELECT tgname FROM pg_trigger WHERE NOT tgisinternal`);
        expect(triggers.rows).toEqual([]);
      });
      await ds.undoLastMigration({ transaction: 'each' });
      await withPg(url, async (db) => {
        const tables = await db.query(
          `SELECT table_name FROM information_schema.tables WHERE table_name IN ('waiting_rooms', 'admission_batches', 'service_secrets')`,
        );
        expect(tables.rows).toEqual([]);
      });
    } finally {
      await ds.destroy();
    }
  });

  it('should refuse to go back while a user holds two orders of one product, and go back once none does', async () => {
    const ds = await migrateWith(url, [InitialSchema1763700000000, OrderLifecycle1763900000000]);
    try {
      await expect(ds.undoLastMigration({ transaction: 'each' })).rejects.toThrow(
        /cannot go back: 1 users ordered a product again/,
      );
      await withPg(url, (db) => db.query(`DELETE FROM orders WHERE user_id = 'cy'`));
      await ds.undoLastMigration({ transaction: 'each' });
    } finally {
      await ds.destroy();
    }
    await withPg(url, async (db) => {
      const columns = await db.query(
        `SELECT column_name FROM information_schema.columns WHERE table_name = 'orders' ORDER BY ordinal_position`,
      );
      expect(columns.rows.map((c) => c.column_name)).toEqual([
        'id',
        'product_id',
        'user_id',
        'quantity',
        'allocations',
        'created_at',
      ]);
      await expect(
        db.query(`INSERT INTO orders (product_id, user_id, quantity, allocations) VALUES (1, 'ann', 1, '[]')`),
      ).rejects.toMatchObject({
        code: '23505',
        constraint: 'orders_one_per_user',
      });
    });
  });
});
