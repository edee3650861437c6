// An admission does not run out while there is nothing to buy. The room admits up to
// ADMISSION_RATIO x the units left, so when the last unit is reserved some admitted buyers are told
// `sold_out`; their admissions used to keep counting down meanwhile, and one that ran out before a
// unit came back ended its ticket while the unit went to a place behind it. `paused_since` is set
// by the admission clock when it finds no unit left with admissions outstanding, and cleared when
// units come back, after pushing the expiry of every admission live at the pause back by the
// pause's length: an admission's lifetime counts only time with units on sale.
import { MigrationInterface, QueryRunner } from 'typeorm';

export class AdmissionPause1764400000000 implements MigrationInterface {
  name = 'AdmissionPause1764400000000';

  public async up(q: QueryRunner): Promise<void> {
    await q.query('ALTER TABLE waiting_rooms ADD COLUMN paused_since timestamptz');
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query('ALTER TABLE waiting_rooms DROP COLUMN paused_since');
  }
}
