// Products, their stock segments and orders; the invariants live in the schema as constraints.
import { MigrationInterface, QueryRunner } from 'typeorm';

export class InitialSchema1763700000000 implements MigrationInterface {
  name = 'InitialSchema1763700000000';

  public async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE products (
        id              serial PRIMARY KEY,
        name            varchar(200) NOT NULL,
        total_stock     bigint  NOT NULL CHECK (total_stock >= 0),
        limit_per_user  integer NOT NULL DEFAULT 1 CHECK (limit_per_user >= 1),
        segment_count   integer NOT NULL CHECK (segment_count BETWEEN 1 AND 1024),
        layout_version  integer NOT NULL DEFAULT 1,
        created_at      timestamptz NOT NULL DEFAULT now()
      )`);
    await q.query(`
      CREATE TABLE stock_segments (
        product_id  integer NOT NULL REFERENCES products(id) ON DELETE CASCADE,
        idx         integer NOT NULL CHECK (idx >= 0),
        stock       bigint  NOT NULL CHECK (stock >= 0),
        PRIMARY KEY (product_id, idx)
      )`);
    await q.query(`
      CREATE TABLE orders (
        id          bigserial PRIMARY KEY,
        product_id  integer NOT NULL REFERENCES products(id),
        user_id     varchar(64) NOT NULL,
        quantity    integer NOT NULL CHECK (quantity >= 1),
        allocations jsonb NOT NULL,
        created_at  timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT orders_one_per_user UNIQUE (product_id, user_id)
      )`);
  }

  public async down(q: QueryRunner): Promise<void> {
    await q.query('DROP TABLE orders');
    await q.query('DROP TABLE stock_segments');
    await q.query('DROP TABLE products');
  }
}
