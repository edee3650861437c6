// The SQL behind admissions: the signing key every process shares when the operator set none, and
// whether an order already spent an admitted position.
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

  /** The order that spent an admission (any status), or null: an admission is spent once, by its order. */
  async spentBy(productId: number, position: number): Promise<string | null> {
    const rows: Array<{ id: string }> = await this.db.query(
      `SELECT id FROM orders WHERE product_id = $1 AND admission_position = $2`,
      [productId, position],
    );
    return rows.length === 0 ? null : String(rows[0].id);
  }
}
