// The order's life (reserved, then paid, cancelled or expired) and the sale's window. Orders taken
// before this migration were final when taken: they become `paid`. One live order per user and
// product: the unique key moves to a partial index over reserved and paid orders, so a cancelled or
// expired order no longer stops its user from ordering again.
import { MigrationInterface, QueryRunner } from 'typeorm';

export class OrderLifecycle1763900000000 implements MigrationInterface {
  name = 'OrderLifecycle1763900000000';

  public async up(q: QueryRunner): Promise<void> {
    await q.query(`
      ALTER TABLE products
        ADD COLUMN starts_at         timestamptz,
        ADD COLUMN ends_at           timestamptz,
        ADD COLUMN payment_timeout_s integer NOT NULL DEFAULT 900 CHECK (payment_timeout_s BETWEEN 1 AND 86400),
        ADD CONSTRAINT products_window CHECK (ends_at > starts_at)`);
    // Existing rows get their values from the defaults ('paid', their creation time); new rows name
    // every column, so the defaults are dropped once the old rows are filled.
    await q.query(`
      ALTER TABLE orders
        ADD COLUMN status     varchar(9)  NOT NULL DEFAULT 'paid' CHECK (status IN ('reserved', 'paid', 'cancelled', 'expired')),
        ADD COLUMN expires_at timestamptz NOT NULL DEFAULT now(),
        ADD COLUMN paid_at    timestamptz,
        ADD COLUMN closed_at  timestamptz`);
    await q.query(`UPDATE orders SET expires_at = created_at, paid_at = created_at`);
    await q.query(`ALTER TABLE orders ALTER COLUMN status DROP DEFAULT, ALTER COLUMN expires_at DROP DEFAULT`);
    await q.query(`
      ALTER TABLE orders ADD CONSTRAINT orders_state_times CHECK (
        (status = 'paid') = (paid_at IS NOT NULL) AND (status IN ('cancelled', 'expired')) = (closed_at IS NOT NULL))`);
    await q.query(`ALTER TABLE orders DROP CONSTRAINT orders_one_per_user`);
    await q.query(
      `CREATE UNIQUE INDEX orders_one_live_per_user ON orders (product_id, user_id) WHERE status IN ('reserved', 'paid')`,
    );
    // The sweep's question: which reservations have run out.
    await q.query(`CREATE INDEX orders_reserved_expiry ON orders (expires_at) WHERE status = 'reserved'`);
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query('DROP INDEX orders_reserved_expiry');
    // The old key allows one order per user and product, live or not; orders are never deleted here.
    const [{ n }] = (await q.query(
      `SELECT count(*)::int AS n FROM (SELECT 1 FROM orders GROUP BY product_id, user_id HAVING count(*) > 1) d`,
    )) as Array<{
      n: number;
    }>;
    if (n > 0) throw new Error(`cannot go back: ${n} users ordered a product again after a cancelled or expired order`);
    await q.query('ALTER TABLE orders ADD CONSTRAINT orders_one_per_user UNIQUE (product_id, user_id)');
    await q.query('DROP INDEX orders_one_live_per_user');
    await q.query('ALTER TABLE orders DROP CONSTRAINT orders_state_times');
    await q.query(
      'ALTER TABLE orders DROP COLUMN closed_at, DROP COLUMN paid_at, DROP COLUMN expires_at, DROP COLUMN status',
    );
    await q.query('ALTER TABLE products DROP CONSTRAINT products_window');
    await q.query('ALTER TABLE products DROP COLUMN payment_timeout_s, DROP COLUMN ends_at, DROP COLUMN starts_at');
  }
}
