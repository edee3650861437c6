// queue_join() looks its group's users up one by one, whatever PostgreSQL believes of the queue's
// length. Its two lookups (is this user new, and each user's ticket for the answer) were joins, and
// joins are planned once per session from statistics that lag behind a queue filling at thousands of
// rows a second: believing a new product had no ticket, PostgreSQL read every ticket of the product
// on each call, so a call cost more the longer the queue grew. Written as a subquery per user, each
// lookup is one probe of the primary key (product_id, user_id), which no estimate changes; which
// tickets the call made is read from the rows' xmin, not by matching two arrays.
// Frozen: the SQL this migration installs, and restores going back, is written out here in full.
import { MigrationInterface, QueryRunner } from 'typeorm';

const SIGNATURE = 'queue_join(integer, boolean, text[], text[], bytea[])';

export class QueueJoinLookups1764350000000 implements MigrationInterface {
  name = 'QueueJoinLookups1764350000000';

  public async up(q: QueryRunner): Promise<void> {
    await q.query(QUEUE_JOIN_LOOKUPS);
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP FUNCTION ${SIGNATURE}`);
    await q.query(QUEUE_JOIN_BEFORE);
  }
}

// The same contract as before (see 1764200000000-QueueInPostgres): one group, in the order given,
// holding the counter row; a user with a ticket gets it back (created = false).
const QUEUE_JOIN_LOOKUPS = `
      CREATE OR REPLACE FUNCTION queue_join(p_product integer, p_arrival boolean, p_users text[], p_tickets text[], p_keys bytea[])
      RETURNS TABLE (user_id text, ticket_id text, kind char(1), "position" bigint, created boolean)
      LANGUAGE plpgsql AS $fn$
      #variable_conflict use_column
      DECLARE
        v_pre integer;
        v_arrivals bigint;
        v_made bigint;
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
          -- A scalar subquery, not NOT EXISTS: it stays a probe per user (never turned into a join).
         WHERE (SELECT true FROM queue_tickets x WHERE x.product_id = p_product AND x.user_id = f.u) IS NULL
         ORDER BY f.o
          RETURNING 1)
        SELECT count(*) INTO v_made FROM made;
        IF v_pre IS NOT NULL AND v_made > 0 THEN
          UPDATE queue_counts c SET arrivals = c.arrivals + v_made WHERE c.product_id = p_product;
        END IF;
        -- Each user's ticket by a probe of its own: a LATERAL subquery with OFFSET 0 is never
        -- flattened into a join, so it runs once per user. Made now: a row this transaction wrote
        -- (its xmin), said of the first time its user appears in the group.
        RETURN QUERY
          SELECT g.u, x.ticket_id::text, x.kind, x.position,
                 x.mine AND g.o = min(g.o) OVER (PARTITION BY g.u)
            FROM unnest(p_users) WITH ORDINALITY AS g(u, o)
           CROSS JOIN LATERAL (
                 SELECT t.ticket_id, t.kind, t.position, t.xmin = pg_current_xact_id()::xid AS mine
                   FROM queue_tickets t WHERE t.product_id = p_product AND t.user_id = g.u
                 OFFSET 0) x
           ORDER BY g.o;
      END
      $fn$`;

/** queue_join() as 1764200000000-QueueInPostgres made it: what going back restores. */
const QUEUE_JOIN_BEFORE = `
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
