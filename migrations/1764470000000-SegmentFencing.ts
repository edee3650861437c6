// Fencing tokens on the segment rows (Kleppmann's answer to a lock that can fail). Every take of a
// segment's Redis lock comes with a token that rises with each take (an INCR beside the lock, see
// src/orders/sale/lock.service.ts), and every sale write made under that lock stores its token in
// `fence`. A write whose token is below the fence already stored comes from a holder that lost its
// lock to a newer one that has written since (a pause past the lease, a failover): PostgreSQL
// refuses it here, whoever sends it, with SQLSTATE FENCE and the stored fence in the error's
// DETAIL. An equal token passes (one take writing again, as a refused batch is run again).
//
// Only writes that name `fence` are checked (UPDATE OF fence): units coming back, restocks and
// rebalances take PostgreSQL's row locks, not the Redis lock, carry no token and leave the fence
// as it is.
import { MigrationInterface, QueryRunner } from 'typeorm';

export class SegmentFencing1764470000000 implements MigrationInterface {
  name = 'SegmentFencing1764470000000';

  public async up(q: QueryRunner): Promise<void> {
    await q.query('ALTER TABLE stock_segments ADD COLUMN fence bigint NOT NULL DEFAULT 0');
    await q.query(`
      CREATE FUNCTION refuse_stale_fence() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        RAISE EXCEPTION 'stale fencing token % for segment % of product %: the segment has seen %',
            NEW.fence, NEW.idx, NEW.product_id, OLD.fence
          USING ERRCODE = 'FENCE', DETAIL = OLD.fence::text;
      END $$`);
    await q.query(`
      CREATE TRIGGER stock_segments_fence BEFORE UPDATE OF fence ON stock_segments
        FOR EACH ROW WHEN (NEW.fence < OLD.fence) EXECUTE FUNCTION refuse_stale_fence()`);
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query('DROP TRIGGER stock_segments_fence ON stock_segments');
    await q.query('DROP FUNCTION refuse_stale_fence()');
    await q.query('ALTER TABLE stock_segments DROP COLUMN fence');
  }
}
