// The pre-queue counted as it fills. Before the draw a pre-queue ticket has no place, yet its
// lottery key already says roughly where the draw will put it: about its key's share of the key
// space times the pre-queue's size. The service uses that to time each pre-queue ticket's first
// poll after the start (the tickets likely to be admitted first poll first; see
// src/waiting-room/ticket-status.ts, firstPollWave), and for it needs the pre-queue's size so far.
// queue_join() holds the counter row for every group already; it now adds a pre-queue group's new
// tickets to `pre_joined` in the same update that adds arrivals to `arrivals`.
import { MigrationInterface, QueryRunner } from 'typeorm';
import { QUEUE_JOIN_LOOKUPS } from './1764350000000-QueueJoinLookups';

const ARRIVALS_ONLY = `IF v_pre IS NOT NULL AND v_made > 0 THEN
          UPDATE queue_counts c SET arrivals = c.arrivals + v_made WHERE c.product_id = p_product;
        END IF;`;

const BOTH_COUNTED = `IF v_made > 0 THEN
          UPDATE queue_counts c
             SET arrivals = c.arrivals + CASE WHEN v_pre IS NULL THEN 0 ELSE v_made END,
                 pre_joined = c.pre_joined + CASE WHEN v_pre IS NULL THEN v_made ELSE 0 END
           WHERE c.product_id = p_product;
        END IF;`;

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
    if (!QUEUE_JOIN_LOOKUPS.includes(ARRIVALS_ONLY))
      throw new Error('queue_join() is not the one this migration expects');
    await q.query('ALTER TABLE queue_counts ADD COLUMN pre_joined bigint NOT NULL DEFAULT 0');
    await q.query(`UPDATE queue_counts c SET pre_joined = (SELECT count(*) FROM queue_tickets t
                    WHERE t.product_id = c.product_id AND t.kind = 'p')`);
    await q.query(QUEUE_JOIN_LOOKUPS.replace(ARRIVALS_ONLY, BOTH_COUNTED));
    await q.query(countsForRoom('pre_queue = NULL, arrivals = 0, pre_joined = 0'));
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query(countsForRoom('pre_queue = NULL, arrivals = 0'));
    await q.query(QUEUE_JOIN_LOOKUPS);
    await q.query('ALTER TABLE queue_counts DROP COLUMN pre_joined');
  }
}
