// queue_join answers the tickets it makes from what its insert returned, and looks up only the users
// who had a ticket already; and it plans its statements once for any product (a generic plan).
// Before, every user of a group was looked up after the insert, and the plan of that lookup was
// made for the product at hand: for a product the table's statistics had not seen yet (every new
// sale, until the next ANALYZE) PostgreSQL reckoned one ticket for it, and took the smaller
// (product_id, bucket) index, reading every ticket of the product for each user of the group: a
// group's call grew with the product's queue (1,000 users: 0.6 s once the product held some
// 20,000 tickets), and the seal, which waits for the joins of its buckets, with it. A generic
// plan reckons a product's tickets from the number of products, never fewer than its users'.
// Frozen: the function it installs, and the one it restores going back, are written out here.
import { MigrationInterface, QueryRunner } from 'typeorm';

export class QueueJoinMade1764550000000 implements MigrationInterface {
  name = 'QueueJoinMade1764550000000';

  public async up(q: QueryRunner): Promise<void> {
    await q.query(QUEUE_JOIN);
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query(QUEUE_JOIN_BEFORE);
  }
}

/**
 * One group of joins, in the order given: each user's ticket, made now (created) or the one they
 * had. A new ticket goes to the bucket of PostgreSQL's clock: the pre-queue (0) before the
 * product's starts_at, else floor(epoch ms / bucket_ms). The join holds its bucket's lock shared
 * (one of 16 stripes, by session) until it commits; if the bucket is sealed already, the ticket
 * goes to the bucket of now instead. Nothing here is held by every join: joins of one product run
 * side by side. Returns no row when the product has no room.
 */
const QUEUE_JOIN = `
      CREATE OR REPLACE FUNCTION queue_join(p_product integer, p_users text[], p_tickets text[])
      RETURNS TABLE (user_id text, ticket_id text, bucket bigint, "position" bigint, created boolean)
      LANGUAGE plpgsql
      SET plan_cache_mode = force_generic_plan
      AS $fn$
      #variable_conflict use_column
      DECLARE
        v_ms integer;
        v_starts timestamptz;
        v_at timestamptz := clock_timestamp();
        v_bucket bigint;
        v_sealed bigint;
        v_made_users text[];
        v_made_tickets text[];
        v_made bigint;
        v_stripe integer := pg_backend_pid() % 16;
      BEGIN
        SELECT w.bucket_ms, p.starts_at INTO v_ms, v_starts
          FROM waiting_rooms w JOIN products p ON p.id = w.product_id WHERE w.product_id = p_product;
        IF NOT FOUND THEN RETURN; END IF;
        v_bucket := CASE WHEN v_starts IS NOT NULL AND v_at < v_starts THEN 0
                         ELSE floor(extract(epoch FROM v_at) * 1000 / v_ms)::bigint END;
        LOOP
          -- The lock's key: the queue's mark, the product, the bucket's slot of 64, the stripe.
          PERFORM pg_advisory_xact_lock_shared(
            (x'51'::bigint << 56) | (p_product::bigint << 10) | ((v_bucket % 64) << 4) | v_stripe);
          SELECT w.sealed_through INTO v_sealed FROM waiting_rooms w WHERE w.product_id = p_product;
          EXIT WHEN v_sealed < v_bucket;
          v_bucket := GREATEST(v_sealed + 1, floor(extract(epoch FROM clock_timestamp()) * 1000 / v_ms)::bigint);
        END LOOP;
        WITH made AS (
          INSERT INTO queue_tickets (product_id, user_id, ticket_id, bucket)
          SELECT p_product, g.u, g.t, v_bucket
            FROM unnest(p_users, p_tickets) WITH ORDINALITY AS g(u, t, o)
           ORDER BY g.o
          ON CONFLICT (product_id, user_id) DO NOTHING
          RETURNING queue_tickets.user_id, queue_tickets.ticket_id)
        SELECT array_agg(m.user_id), array_agg(m.ticket_id::text), count(*) INTO v_made_users, v_made_tickets, v_made FROM made m;
        IF v_bucket = 0 AND v_made > 0 THEN
          UPDATE queue_counts c SET pre_joined = c.pre_joined + v_made
           WHERE c.product_id = p_product AND c.stripe = v_stripe;
        END IF;
        -- A ticket made here is answered from what the insert returned; only a user who had one
        -- already is looked up, each by a probe of its own (a LATERAL subquery with OFFSET 0 is
        -- never flattened into a join; it runs only where the user's ticket was not made here).
        -- Made now: said of the first time its user appears in the group.
        RETURN QUERY
          SELECT g.u, COALESCE(m.t, x.ticket_id::text), CASE WHEN m.u IS NULL THEN x.bucket ELSE v_bucket END,
                 x.position, m.u IS NOT NULL AND g.o = min(g.o) OVER (PARTITION BY g.u)
            FROM unnest(p_users) WITH ORDINALITY AS g(u, o)
            LEFT JOIN unnest(v_made_users, v_made_tickets) AS m(u, t) ON m.u = g.u
            LEFT JOIN LATERAL (
                 SELECT t.ticket_id, t.bucket, t.position
                   FROM queue_tickets t WHERE m.u IS NULL AND t.product_id = p_product AND t.user_id = g.u
                 OFFSET 0) x ON true
           WHERE m.u IS NOT NULL OR x.ticket_id IS NOT NULL
           ORDER BY g.o;
      END
      $fn$
      `;

/** queue_join() as 1764500000000-QueueBuckets made it: what going back restores. */
const QUEUE_JOIN_BEFORE = `
      CREATE OR REPLACE FUNCTION queue_join(p_product integer, p_users text[], p_tickets text[])
      RETURNS TABLE (user_id text, ticket_id text, bucket bigint, "position" bigint, created boolean)
      LANGUAGE plpgsql AS $fn$
      #variable_conflict use_column
      DECLARE
        v_ms integer;
        v_starts timestamptz;
        v_at timestamptz := clock_timestamp();
        v_bucket bigint;
        v_sealed bigint;
        v_made bigint;
        v_stripe integer := pg_backend_pid() % 16;
      BEGIN
        SELECT w.bucket_ms, p.starts_at INTO v_ms, v_starts
          FROM waiting_rooms w JOIN products p ON p.id = w.product_id WHERE w.product_id = p_product;
        IF NOT FOUND THEN RETURN; END IF;
        v_bucket := CASE WHEN v_starts IS NOT NULL AND v_at < v_starts THEN 0
                         ELSE floor(extract(epoch FROM v_at) * 1000 / v_ms)::bigint END;
        LOOP
          -- The lock's key: the queue's mark, the product, the bucket's slot of 64, the stripe.
          PERFORM pg_advisory_xact_lock_shared(
            (x'51'::bigint << 56) | (p_product::bigint << 10) | ((v_bucket % 64) << 4) | v_stripe);
          SELECT w.sealed_through INTO v_sealed FROM waiting_rooms w WHERE w.product_id = p_product;
          EXIT WHEN v_sealed < v_bucket;
          v_bucket := GREATEST(v_sealed + 1, floor(extract(epoch FROM clock_timestamp()) * 1000 / v_ms)::bigint);
        END LOOP;
        WITH made AS (
          INSERT INTO queue_tickets (product_id, user_id, ticket_id, bucket)
          SELECT p_product, g.u, g.t, v_bucket
            FROM unnest(p_users, p_tickets) WITH ORDINALITY AS g(u, t, o)
           ORDER BY g.o
          ON CONFLICT (product_id, user_id) DO NOTHING
          RETURNING 1)
        SELECT count(*) INTO v_made FROM made;
        IF v_bucket = 0 AND v_made > 0 THEN
          UPDATE queue_counts c SET pre_joined = c.pre_joined + v_made
           WHERE c.product_id = p_product AND c.stripe = v_stripe;
        END IF;
        -- Each user's ticket by a probe of its own (a LATERAL subquery with OFFSET 0 is never
        -- flattened into a join). Made now: a row this transaction wrote, said of the first time
        -- its user appears in the group.
        RETURN QUERY
          SELECT g.u, x.ticket_id::text, x.bucket, x.position,
                 x.mine AND g.o = min(g.o) OVER (PARTITION BY g.u)
            FROM unnest(p_users) WITH ORDINALITY AS g(u, o)
           CROSS JOIN LATERAL (
                 SELECT t.ticket_id, t.bucket, t.position, t.xmin = pg_current_xact_id()::xid AS mine
                   FROM queue_tickets t WHERE t.product_id = p_product AND t.user_id = g.u
                 OFFSET 0) x
           ORDER BY g.o;
      END
      $fn$`;
