// The SQL behind admissions: the signing key every process shares when the operator set none, and
// whether an order already spent an admitted position (asked for many positions at once).
import { randomBytes } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';

@Injectable()
export class AdmissionsRepository {
  constructor(private readonly db: DataSource) {}

  /** A key made by the first process to ask, then shared through PostgreSQL. */
  async sharedSecret(name: string): Promise<Buffer> {
    await this.db.query(`INSERT INTO service_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, [
      name,
      randomBytes(32),
    ]);
    const rows: Array<{ value: Buffer }> = await this.db.query(`SELECT value FROM service_secrets WHERE name = $1`, [
      name,
    ]);
    return rows[0].value;
  }

  /**
   * For each position, the order that spent its admission (any status), or null: an admission is
   * spent once, by its order. One statement for a group of positions of one product.
   */
  async spentBy(productId: number, positions: readonly number[]): Promise<Array<string | null>> {
    const rows: Array<{ position: string; id: string }> = await this.db.query(
      `SELECT admission_position::text AS position, id::text AS id FROM orders
        WHERE product_id = $1 AND admission_position = ANY($2::bigint[])`,
      [productId, positions],
    );
    const spent = new Map(rows.map((r) => [Number(r.position), r.id]));
    return positions.map((p) => spent.get(p) ?? null);
  }
}
