// Proof of work at the queue and the buyer's waiting page. A product may require a solved
// proof-of-work challenge to join its queue (`proof_of_work`, off by default), and names the shop's
// page its admitted buyers continue to (`continue_url`, none by default: the waiting page then shows
// the admission token).
import { MigrationInterface, QueryRunner } from 'typeorm';

export class ProofOfWork1764250000000 implements MigrationInterface {
  name = 'ProofOfWork1764250000000';

  public async up(q: QueryRunner): Promise<void> {
    await q.query(`
      ALTER TABLE products
        ADD COLUMN proof_of_work boolean NOT NULL DEFAULT false,
        ADD COLUMN continue_url  text CHECK (char_length(continue_url) <= 2048)`);
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query('ALTER TABLE products DROP COLUMN continue_url, DROP COLUMN proof_of_work');
  }
}
