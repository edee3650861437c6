// `product.sold_out` after its cause. The trigger of 1764100000000-OrderEvents wrote the event when
// a statement emptied the product's last segment; the sale statement empties the segment before it
// inserts the order (one statement, the segment's CTE first), so the stream read `product.sold_out`
// before the `order.reserved` that took the last unit. The event is now written when the
// transaction commits, after everything the transaction did: a deferred constraint trigger, queued
// only by a row update that empties a segment (so a sale that empties nothing queues nothing).
//
// Once per product and transaction, and once overall, as before: at commit the transaction takes
// the product's sold-out lock (a transaction advisory lock, 1936682084 is 'sold' in ASCII) and sums
// the segments; of two transactions emptying the last two segments at once, the second to get the
// lock sees the first's commit. Several emptied segments of one transaction write one event.
import { MigrationInterface, QueryRunner } from 'typeorm';

export class SoldOutAfterCause1764300000000 implements MigrationInterface {
  name = 'SoldOutAfterCause1764300000000';

  public async up(q: QueryRunner): Promise<void> {
    await q.query('DROP TRIGGER product_events_on_segments ON stock_segments');
    await q.query('DROP FUNCTION product_events_segments_updated()');
    await q.query(`
      CREATE FUNCTION product_sold_out_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF current_setting('flashsale.events', true) = 'off' THEN RETURN NULL; END IF;
        PERFORM pg_advisory_xact_lock(1936682084, NEW.product_id);
        INSERT INTO order_events (product_id, type, data)
        SELECT NEW.product_id, 'product.sold_out', jsonb_build_object('productId', NEW.product_id, 'stock', 0)
         WHERE (SELECT sum(stock) FROM stock_segments WHERE product_id = NEW.product_id) = 0
           AND NOT EXISTS (SELECT 1 FROM order_events
                            WHERE tx = pg_current_xact_id() AND product_id = NEW.product_id AND type = 'product.sold_out');
        RETURN NULL;
      END $$`);
    await q.query(`
      CREATE CONSTRAINT TRIGGER product_sold_out_at_commit AFTER UPDATE ON stock_segments
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.stock = 0 AND OLD.stock > 0)
        EXECUTE FUNCTION product_sold_out_at_commit()`);
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query('DROP TRIGGER product_sold_out_at_commit ON stock_segments');
    await q.query('DROP FUNCTION product_sold_out_at_commit()');
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
  }
}
