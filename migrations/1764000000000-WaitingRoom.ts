// The waiting room. A product may sell only to buyers admitted from its queue (`waiting_room`);
// an admission lasts `admission_ttl_s`. The queue itself lives in Redis; what must outlive Redis is
// here: the lottery's seed (secret until the start, its SHA-256 public from the moment the room
// exists), the size of the drawn pre-queue, the queue's epoch (a new one after Redis lost the
// queue's control keys) and every admission batch ever made, which is also the admission cursor.
// An order records the admission it spent; a unique index makes each admission spendable once.
import { MigrationInterface, QueryRunner } from 'typeorm';

export class WaitingRoom1764000000000 implements MigrationInterface {
  name = 'WaitingRoom1764000000000';

  public async up(q: QueryRunner): Promise<void> {
    await q.query(`
      ALTER TABLE products
        ADD COLUMN waiting_room    boolean NOT NULL DEFAULT false,
        ADD COLUMN admission_ttl_s integer NOT NULL DEFAULT 120 CHECK (admission_ttl_s BETWEEN 10 AND 3600)`);
    await q.query(`
      CREATE TABLE waiting_rooms (
        product_id     integer PRIMARY KEY REFERENCES products(id) ON DELETE CASCADE,
        seed           bytea   NOT NULL,
        seed_hash      char(64) NOT NULL,
        pre_queue      integer,
        drawn_at       timestamptz,
        epoch          integer NOT NULL DEFAULT 1,
        position_base  bigint  NOT NULL DEFAULT 0,
        high_water     bigint  NOT NULL DEFAULT 0,
        admitted_through bigint NOT NULL DEFAULT 0
      )`);
    await q.query(`
      CREATE TABLE admission_batches (
        product_id         integer     NOT NULL REFERENCES products(id) ON DELETE CASCADE,
        first_position     bigint      NOT NULL,
        last_position      bigint      NOT NULL CHECK (last_position >= first_position),
        admitted_at        timestamptz NOT NULL,
        expires_at         timestamptz NOT NULL,
        units_left         integer     NOT NULL,
        outstanding_before integer     NOT NULL,
        PRIMARY KEY (product_id, first_position)
      )`);
    await q.query(`ALTER TABLE orders ADD COLUMN admission_position bigint`);
    await q.query(
      `CREATE UNIQUE INDEX orders_admission_spent ON orders (product_id, admission_position) WHERE admission_position IS NOT NULL`,
    );
    // Secrets every process of a deployment must share when the operator set none (the admission
    // tokens' signing key): made once by whichever process starts first.
    await q.query(`CREATE TABLE service_secrets (name text PRIMARY KEY, value bytea NOT NULL)`);
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query('DROP TABLE service_secrets');
    await q.query('DROP INDEX orders_admission_spent');
    await q.query('ALTER TABLE orders DROP COLUMN admission_position');
    await q.query('DROP TABLE admission_batches');
    await q.query('DROP TABLE waiting_rooms');
    await q.query('ALTER TABLE products DROP COLUMN admission_ttl_s, DROP COLUMN waiting_room');
  }
}
