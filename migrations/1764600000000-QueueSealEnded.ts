// queue_seal_ended: the seal as one statement, so that a process seals a bucket that has ended in
// one round trip, committed when it answers. Before, the seal was a transaction of its own
// statements (take the room's row, read how far it was sealed, queue_seal, read it again, the
// admission step, commit): each a turn of a busy event loop, and the draw was seen only at the end.
// It takes the room's row (waiting for another sealer rather than skipping it: that one is short),
// then seals as queue_seal does, and says which buckets it sealed: from .. through, with the draws
// made (a row with a null bucket when it made none). Frozen: the function it installs is written
// out here.
import { MigrationInterface, QueryRunner } from 'typeorm';

export class QueueSealEnded1764600000000 implements MigrationInterface {
  name = 'QueueSealEnded1764600000000';

  public async up(q: QueryRunner): Promise<void> {
    await q.query(QUEUE_SEAL_ENDED);
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query('DROP FUNCTION queue_seal_ended(integer)');
  }
}

const QUEUE_SEAL_ENDED = `
      CREATE FUNCTION queue_seal_ended(p_product integer)
      RETURNS TABLE (bucket bigint, draw integer, first_position bigint, tickets integer, seed bytea,
                     sealed_from bigint, sealed_through bigint)
      LANGUAGE plpgsql AS $fn$
      DECLARE
        v_from bigint;
        v_through bigint;
        a_bucket bigint[];
        a_draw integer[];
        a_first bigint[];
        a_tickets integer[];
        a_seed bytea[];
      BEGIN
        SELECT w.sealed_through + 1 INTO v_from FROM waiting_rooms w WHERE w.product_id = p_product FOR UPDATE;
        IF NOT FOUND THEN RETURN; END IF;
        SELECT array_agg(s.bucket ORDER BY s.bucket), array_agg(s.draw ORDER BY s.bucket),
               array_agg(s.first_position ORDER BY s.bucket), array_agg(s.tickets ORDER BY s.bucket),
               array_agg(s.seed ORDER BY s.bucket)
          INTO a_bucket, a_draw, a_first, a_tickets, a_seed
          FROM queue_seal(p_product) s;
        SELECT w.sealed_through INTO v_through FROM waiting_rooms w WHERE w.product_id = p_product;
        RETURN QUERY
          SELECT u.b, u.d, u.f, u.t, u.s, v_from, v_through
            FROM unnest(a_bucket, a_draw, a_first, a_tickets, a_seed) AS u(b, d, f, t, s)
          UNION ALL
          SELECT NULL::bigint, NULL::integer, NULL::bigint, NULL::integer, NULL::bytea, v_from, v_through
           WHERE a_bucket IS NULL
          ORDER BY 1 NULLS LAST;
      END
      $fn$`;
