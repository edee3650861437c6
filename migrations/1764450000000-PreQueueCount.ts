// The pre-queue counted as it fills. Before the draw a pre-queue ticket has no place, yet its
// lottery key already says roughly where the draw will put it: about its key's share of the key
// space times the pre-queue's size. The service uses that to time each pre-queue ticket's first
// poll after the start (the tickets likely to be admitted first poll first; see
// src/waiting-room/ticket-status.ts, firstPollWave), and for it needs the pre-queue's size so far.
// queue_join() holds the counter row for every group already; it now adds a pre-queue group's new
// tickets to `pre_joined` in the same update that adds arrivals to `arrivals`.
// Frozen: the SQL this migration installs, and restores going back, is written out here in full.
import { MigrationInterface, QueryRunner } from 'typeorm';

/** The counter row made with its room (see 1764200000000-QueueInPostgres), from zero: `reset` lists what a room made again starts from. */
const countsForRoom = (reset: string) => `
      CREATE OR REPLACE FUNCTION queue_counts_for_room() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        INSERT INTO queue_counts (product_id) VALUES (NEW.product_id)
          ON CONFLICT (product_id) DO UPDATE SET ${reset};
        RETURN NULL;
      END
      $fn$`;

export class PreQueueCount1764450000000 implements MigrationInterface {
  name = 'PreQueueCount1764450000000';

  public async up(q: QueryRunner): Promise<void> {
    await q.query('ALTER TABLE queue_counts ADD COLUMN pre_joined bigint NOT NULL DEFAULT 0');
    await q.query(`UPDATE queue_counts c SET pre_joined = (SELECT count(*) FROM queue_tickets t
                    WHERE t.product_id = c.product_id AND t.kind = 'p')`);
    await q.query(QUEUE_JOIN_COUNTED);
    await q.query(countsForRoom('pre_queue = NULL, arrivals = 0, pre_joined = 0'));
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query(countsForRoom('pre_queue = NULL, arrivals = 0'));
    await q.query(QUEUE_JOIN_BEFORE);
    await q.query('ALTER TABLE queue_counts DROP COLUMN pre_joined');
  }
}

// queue_join() as 1764350000000-QueueJoinLookups made it, but adding a pre-queue group's new
// tickets to `pre_joined` in the same update that adds arrivals to `arrivals`. Exported for the
// benchmark, which runs this counter-row design beside the buckets (bench/intake.ts); no migration
// imports it.
export const QUEUE_JOIN_COUNTED = `
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
        IF v_made > 0 THEN
          UPDATE queue_counts c
             SET arrivals = c.arrivals + CASE WHEN v_pre IS NULL THEN 0 ELSE v_made END,
                 pre_joined = c.pre_joined + CASE WHEN v_pre IS NULL THEN v_made ELSE 0 END
           WHERE c.product_id = p_product;
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

/** queue_join() as 1764350000000-QueueJoinLookups made it: what going back restores. */
const QUEUE_JOIN_BEFORE = `
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
