// The waiting room's queue moves from Redis to PostgreSQL: a ticket is a row, made once per user
// and product, and its place is written with it. A Redis loss then costs no place: there is nothing
// of the queue left in Redis to lose. Joins come in groups (one call per process per round trip),
// and queue_join() numbers a group holding the queue's counter row, so positions follow arrival
// order across processes, are never handed out twice and leave no gap. The counter has a row of its
// own (queue_counts) so that joins never hold the room's row, which the admission steps take. The
// Redis epochs go.
import { MigrationInterface, QueryRunner } from 'typeorm';

/** queue_join() as this migration makes it (a later migration replaces it). */
const QUEUE_JOIN_FIRST = `
      CREATE FUNCTION queue_join(p_product integer, p_arrival boolean, p_users text[], p_tickets text[], p_keys bytea[])
      RETURNS TABLE (user_id text, ticket_id text, kind char(1), "position" bigint, created boolean)
      LANGUAGE plpgsql AS $fn$
      #variable_conflict use_column
      DECLARE
        v_pre integer;
        v_arrivals bigint;
        v_made text[];
      BEGIN
        SELECT c.pre_queue, c.arrivals INTO v_pre, v_arrivals
          FROM queue_counts c WHERE c.product_id = p_product FOR UPDATE;
        IF NOT FOUND THEN RETURN; END IF;
        IF v_pre IS NULL AND p_arrival THEN
          v_pre := queue_draw(p_product);
        END IF;
        WITH made AS (
          INSERT INTO queue_tickets (product_id, user_id, ticket_id, kind, lottery_key, position)
          SELECT p_product, f.u, f.t,
               CASE WHEN v_pre IS NULL THEN 'p' ELSE 'a' END,
               CASE WHEN v_pre IS NULL THEN f.k END,
               CASE WHEN v_pre IS NULL THEN NULL ELSE v_pre + v_arrivals + row_number() OVER (ORDER BY f.o) END
          FROM (SELECT DISTINCT ON (g.u) g.u, g.t, g.k, g.o
                  FROM unnest(p_users, p_tickets, p_keys) WITH ORDINALITY AS g(u, t, k, o)
                 ORDER BY g.u, g.o) f
         WHERE NOT EXISTS (SELECT 1 FROM queue_tickets x WHERE x.product_id = p_product AND x.user_id = f.u)
         ORDER BY f.o
          RETURNING queue_tickets.user_id)
        SELECT COALESCE(array_agg(m.user_id), '{}') INTO v_made FROM made m;
        IF v_pre IS NOT NULL AND cardinality(v_made) > 0 THEN
          UPDATE queue_counts c SET arrivals = c.arrivals + cardinality(v_made) WHERE c.product_id = p_product;
        END IF;
        -- Made now: the users this call inserted, the first time each appears in the group.
        RETURN QUERY
          SELECT g.u, x.ticket_id::text, x.kind, x.position,
                 m.u IS NOT NULL AND g.o = min(g.o) OVER (PARTITION BY g.u)
            FROM unnest(p_users) WITH ORDINALITY AS g(u, o)
            JOIN queue_tickets x ON x.product_id = p_product AND x.user_id = g.u
            LEFT JOIN unnest(v_made) AS m(u) ON m.u = g.u
           ORDER BY g.o;
      END
      $fn$`;

export class QueueInPostgres1764200000000 implements MigrationInterface {
  name = 'QueueInPostgres1764200000000';

  public async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE queue_tickets (
        -- No foreign key: its check would run once per inserted ticket, on the hottest insert there
        -- is; every row is made by queue_join() for a room that exists.
        product_id  integer     NOT NULL,
        user_id     text        NOT NULL,
        ticket_id   text        COLLATE "C" NOT NULL,
        kind        char(1)     NOT NULL CHECK (kind IN ('p', 'a')),
        lottery_key bytea,
        position    bigint      CHECK (position >= 1),
        joined_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (product_id, user_id),
        CHECK (kind = 'a' OR lottery_key IS NOT NULL),
        CHECK (kind = 'p' OR position IS NOT NULL)
      )`);
    await q.query(
      `CREATE UNIQUE INDEX queue_tickets_position ON queue_tickets (product_id, position) WHERE position IS NOT NULL`,
    );
    // Positions handed out = pre_queue (once drawn) + arrivals. waiting_rooms.high_water follows it
    // at each admission step (for the operator page); this row is the exact count.
    await q.query(`
      CREATE TABLE queue_counts (
        -- No foreign key: a check of it would lock the room's row (FOR KEY SHARE) inside a join, while
        -- the admission step holds that row and waits for this one: a deadlock. The row is made
        -- with its room (the trigger below) and never outlives a product (products are not deleted).
        product_id integer PRIMARY KEY,
        pre_queue  integer,
        arrivals   bigint  NOT NULL DEFAULT 0
      )`);
    await q.query(`INSERT INTO queue_counts (product_id, pre_queue) SELECT product_id, pre_queue FROM waiting_rooms`);
    // A room's counter row is made with the room, in its transaction (a new room starts from zero):
    // a join and the draw then only ever lock it.
    await q.query(`
      CREATE FUNCTION queue_counts_for_room() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        INSERT INTO queue_counts (product_id) VALUES (NEW.product_id)
          ON CONFLICT (product_id) DO UPDATE SET pre_queue = NULL, arrivals = 0;
        RETURN NULL;
      END
      $fn$`);
    await q.query(`
      CREATE TRIGGER queue_counts_for_room AFTER INSERT ON waiting_rooms
        FOR EACH ROW EXECUTE FUNCTION queue_counts_for_room()`);
    await q.query(`ALTER TABLE waiting_rooms DROP COLUMN epoch, DROP COLUMN position_base`);
    // The draw, once per room, holding the counter row (so between two groups of joins): every
    // pre-queue ticket's place is its rank by lottery key, ties by ticket id, both compared byte
    // by byte. Returns the pre-queue's size; a second call changes nothing.
    await q.query(`
      CREATE FUNCTION queue_draw(p_product integer) RETURNS integer
      LANGUAGE plpgsql AS $fn$
      DECLARE
        v_pre integer;
      BEGIN
        SELECT c.pre_queue INTO v_pre FROM queue_counts c WHERE c.product_id = p_product FOR UPDATE;
        IF v_pre IS NOT NULL OR NOT FOUND THEN RETURN v_pre; END IF;
        UPDATE queue_tickets t SET position = d.rn
          FROM (SELECT x.user_id, row_number() OVER (ORDER BY x.lottery_key, x.ticket_id) AS rn
                  FROM queue_tickets x WHERE x.product_id = p_product AND x.kind = 'p') d
         WHERE t.product_id = p_product AND t.user_id = d.user_id;
        GET DIAGNOSTICS v_pre = ROW_COUNT;
        UPDATE queue_counts c SET pre_queue = v_pre WHERE c.product_id = p_product;
        RETURN v_pre;
      END
      $fn$`);
    // One group of joins, holding the counter row, in the order given. A join sent as a pre-queue
    // join (before startsAt by its process's clock) joins the pre-queue while it is not drawn; any
    // other takes the next arrival position, drawing the pre-queue first if nobody has (so an
    // arrival always has its place at once). A user who has a ticket gets it back (created =
    // false), also when the same user appears twice in one group.
    await q.query(QUEUE_JOIN_FIRST);
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query('DROP FUNCTION queue_join(integer, boolean, text[], text[], bytea[])');
    await q.query('DROP FUNCTION queue_draw(integer)');
    await q.query('DROP TRIGGER queue_counts_for_room ON waiting_rooms');
    await q.query('DROP FUNCTION queue_counts_for_room()');
    await q.query(
      `ALTER TABLE waiting_rooms ADD COLUMN epoch integer NOT NULL DEFAULT 1, ADD COLUMN position_base bigint NOT NULL DEFAULT 0`,
    );
    await q.query('DROP TABLE queue_counts');
    await q.query('DROP TABLE queue_tickets');
  }
}
