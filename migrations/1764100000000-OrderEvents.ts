// The order event outbox. Every change of an order (reserved, paid, cancelled, expired) is written
// by a statement-level trigger on `orders`, so it lands in the transaction of the statement that made
// it, whichever code path ran that statement (one sale, a group commit batch, a sweep of many
// expiries). A product that goes to zero stock gets `product.sold_out` from a trigger on
// `stock_segments`; the events that carry an operator's intent (created, restocked, rebalanced, the
// window changed) and units put back are written by the code in the transaction that makes them.
//
// A session started with `flashsale.events=off` writes no events: the benchmark's bare peers, which
// share this schema and have no event stream (bench/peers). The service never sets it.
//
// Readers page through events by (tx, id): `tx` is the writing transaction's id, and only events of
// transactions older than every transaction still running are handed out, so a reader never passes
// an event that commits later (see src/events/event-cursor.ts and docs/events.md).
import { MigrationInterface, QueryRunner } from 'typeorm';

export class OrderEvents1764100000000 implements MigrationInterface {
  name = 'OrderEvents1764100000000';

  public async up(q: QueryRunner): Promise<void> {
    // No foreign keys: an outbox must never hold back or be held back by the rows it reports on.
    await q.query(`
      CREATE TABLE order_events (
        tx         xid8        NOT NULL DEFAULT pg_current_xact_id(),
        id         bigserial   NOT NULL,
        product_id integer     NOT NULL,
        order_id   bigint,
        type       varchar(32) NOT NULL,
        data       jsonb       NOT NULL,
        at         timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (tx, id)
      )`);
    // The order as the API shows it, paidAt and closedAt absent until they happen.
    await q.query(`
      CREATE FUNCTION order_event_data(o orders) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
        SELECT jsonb_strip_nulls(jsonb_build_object(
          'id', o.id, 'productId', o.product_id, 'userId', o.user_id, 'quantity', o.quantity,
          'status', o.status, 'allocations', o.allocations, 'createdAt', o.created_at,
          'expiresAt', o.expires_at, 'paidAt', o.paid_at, 'closedAt', o.closed_at))
      $$`);
    await q.query(`
      CREATE FUNCTION order_events_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF current_setting('flashsale.events', true) = 'off' THEN RETURN NULL; END IF;
        INSERT INTO order_events (product_id, order_id, type, data)
        SELECT n.product_id, n.id, 'order.' || n.status, order_event_data(n) FROM new_orders n ORDER BY n.id;
        RETURN NULL;
      END $$`);
    await q.query(`
      CREATE FUNCTION order_events_updated() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF current_setting('flashsale.events', true) = 'off' THEN RETURN NULL; END IF;
        INSERT INTO order_events (product_id, order_id, type, data)
        SELECT n.product_id, n.id, 'order.' || n.status, order_event_data(n)
          FROM new_orders n JOIN old_orders o ON o.id = n.id
         WHERE n.status IS DISTINCT FROM o.status ORDER BY n.id;
        RETURN NULL;
      END $$`);
    await q.query(`
      CREATE TRIGGER order_events_on_insert AFTER INSERT ON orders
        REFERENCING NEW TABLE AS new_orders FOR EACH STATEMENT EXECUTE FUNCTION order_events_inserted()`);
    await q.query(`
      CREATE TRIGGER order_events_on_update AFTER UPDATE ON orders
        REFERENCING OLD TABLE AS old_orders NEW TABLE AS new_orders FOR EACH STATEMENT EXECUTE FUNCTION order_events_updated()`);
    // Sold out: a statement that empties a segment takes the product's sold-out lock (a transaction
    // advisory lock, held to its commit; 1936682084 is
    // 'sold' in ASCII) and then sums the product's segments. Of two transactions
    // emptying the last two segments at once, the second to get the lock sees the first's commit,
    // so the product's last unit always yields the event, once. Statements that empty nothing (most
    // sales) take no lock and read nothing.
    await q.query(`
      CREATE FUNCTION product_events_segments_updated() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE
        p integer;
      BEGIN
        IF current_setting('flashsale.events', true) = 'off' THEN RETURN NULL; END IF;
        FOR p IN SELECT DISTINCT n.product_id FROM new_segments n JOIN old_segments o USING (product_id, idx)
                  WHERE n.stock = 0 AND o.stock > 0 ORDER BY 1
        LOOP
          PERFORM pg_advisory_xact_lock(1936682084, p);
          INSERT INTO order_events (product_id, type, data)
          SELECT p, 'product.sold_out', jsonb_build_object('productId', p, 'stock', 0)
           WHERE (SELECT sum(stock) FROM stock_segments WHERE product_id = p) = 0;
        END LOOP;
        RETURN NULL;
      END $$`);
    await q.query(`
      CREATE TRIGGER product_events_on_segments AFTER UPDATE ON stock_segments
        REFERENCING OLD TABLE AS old_segments NEW TABLE AS new_segments
        FOR EACH STATEMENT EXECUTE FUNCTION product_events_segments_updated()`);
    // Marks kept beside the stream: how far it was pruned, and the webhook's delivery cursor and lease.
    await q.query(`
      CREATE TABLE event_marks (
        name        varchar(32) PRIMARY KEY,
        tx          xid8   NOT NULL DEFAULT '0',
        id          bigint NOT NULL DEFAULT 0,
        lease_owner varchar(64),
        lease_until timestamptz,
        failures    integer NOT NULL DEFAULT 0,
        last_error  text
      )`);
    await q.query(`INSERT INTO event_marks (name) VALUES ('pruned')`);
    await q.query(`
      CREATE TABLE webhook_dead_letters (
        id         bigserial PRIMARY KEY,
        first_cursor varchar(48) NOT NULL,
        last_cursor  varchar(48) NOT NULL,
        events     jsonb   NOT NULL,
        attempts   integer NOT NULL,
        last_error text    NOT NULL,
        failed_at  timestamptz NOT NULL DEFAULT now()
      )`);
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query('DROP TABLE webhook_dead_letters');
    await q.query('DROP TABLE event_marks');
    await q.query('DROP TRIGGER product_events_on_segments ON stock_segments');
    await q.query('DROP FUNCTION product_events_segments_updated()');
    await q.query('DROP TRIGGER order_events_on_update ON orders');
    await q.query('DROP TRIGGER order_events_on_insert ON orders');
    await q.query('DROP FUNCTION order_events_updated()');
    await q.query('DROP FUNCTION order_events_inserted()');
    await q.query('DROP FUNCTION order_event_data(orders)');
    await q.query('DROP TABLE order_events');
  }
}
