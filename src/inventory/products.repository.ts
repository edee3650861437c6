// The SQL of the product aggregate (a products row and its stock_segments rows): the terms the
// order path caches, the admin view, and the admin writes (create, change the terms, restock,
// rebalance), each in one transaction. Admin failures are mapped but not counted as dependency
// errors; only the order path's are.
import { createHash, randomBytes } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { DataSource, EntityManager } from 'typeorm';
import { DatabaseConfig, HttpConfig, InventoryConfig, WaitingRoomConfig } from '../config/app-config';
import { mapDatabaseError } from '../common/database-errors';
import { DomainError, ProductNotFoundError } from '../common/domain-errors';
import { writeProductEvent } from '../database/product-events';
import { NewProduct, ProductInfo, ProductView, SaleTerms } from './product.types';
import { evenSplit, fillEvenly } from './segment-plan';

/** The products columns the order path reads, as PostgreSQL returns them. */
export interface ProductTermsRow {
  id: number;
  name: string;
  limit_per_user: number;
  segment_count: number;
  layout_version: number;
  starts_at: Date | null;
  ends_at: Date | null;
  waiting_room: boolean;
  admission_ttl_s: number;
  proof_of_work: boolean;
  continue_url: string | null;
}
export const PRODUCT_TERMS_COLUMNS =
  'id, name, limit_per_user, segment_count, layout_version, starts_at, ends_at, waiting_room, admission_ttl_s, proof_of_work, continue_url';

export function toProductInfo(r: ProductTermsRow): ProductInfo {
  return {
    id: r.id,
    name: r.name,
    limitPerUser: r.limit_per_user,
    segmentCount: r.segment_count,
    layoutVersion: r.layout_version,
    startsAt: r.starts_at?.getTime() ?? null,
    endsAt: r.ends_at?.getTime() ?? null,
    waitingRoom: r.waiting_room,
    admissionTtlS: r.admission_ttl_s,
    proofOfWork: r.proof_of_work,
    continueUrl: r.continue_url,
  };
}

const DEFAULT_PAYMENT_TIMEOUT_S = 900;

@Injectable()
export class ProductsRepository {
  constructor(
    private readonly db: DataSource,
    private readonly inventory: InventoryConfig,
    private readonly database: DatabaseConfig,
    private readonly http: HttpConfig,
    private readonly waitingRoom: WaitingRoomConfig,
  ) {}

  /** The product's terms as the order path needs them; null for an unknown id. */
  async readTerms(productId: number): Promise<ProductInfo | null> {
    let rows: ProductTermsRow[];
    try {
      rows = await this.db.query(`SELECT ${PRODUCT_TERMS_COLUMNS} FROM products WHERE id = $1`, [productId]);
    } catch (err) {
      throw mapDatabaseError(err, this.http.retryAfterS);
    }
    return rows.length === 0 ? null : toProductInfo(rows[0]);
  }

  /** The product with its stock split evenly into its segments. */
  create(p: NewProduct): Promise<ProductView> {
    return this.guard(() =>
      this.db.transaction(async (tx) => {
        const [row] = await tx.query<Array<{ id: number }>>(
          `INSERT INTO products (name, total_stock, limit_per_user, segment_count, starts_at, ends_at, payment_timeout_s,
                                 waiting_room, admission_ttl_s, proof_of_work, continue_url)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id`,
          [
            p.name,
            p.stock,
            p.limitPerUser,
            p.segments,
            p.startsAt,
            p.endsAt,
            p.paymentTimeoutS ?? DEFAULT_PAYMENT_TIMEOUT_S,
            p.waitingRoom,
            p.admissionTtlS,
            p.proofOfWork,
            p.continueUrl,
          ],
        );
        if (p.waitingRoom) await this.openWaitingRoom(tx, row.id);
        await this.writeSegments(tx, row.id, evenSplit(p.stock, p.segments));
        const view = await this.viewIn(tx, row.id);
        await writeProductEvent(tx, row.id, 'product.created', {
          name: view.name,
          stock: view.stock,
          segments: view.segmentCount,
          startsAt: view.startsAt,
          endsAt: view.endsAt,
          waitingRoom: view.waitingRoom,
        });
        return view;
      }),
    );
  }

  view(productId: number): Promise<ProductView> {
    return this.guard(() => this.viewIn(this.db.manager, productId));
  }

  /**
   * Writes the terms that `decide` makes of the current ones, read under the product row's lock so
   * that two changes do not merge with the same stale view; `decide` may refuse by throwing.
   */
  updateTerms(productId: number, decide: (before: ProductView) => SaleTerms): Promise<ProductView> {
    return this.guard(() =>
      this.db.transaction(async (tx) => {
        const before = await this.viewIn(tx, productId, 'FOR NO KEY UPDATE');
        const after = decide(before);
        await tx.query(
          `UPDATE products SET name = $2, limit_per_user = $3, starts_at = $4, ends_at = $5, payment_timeout_s = $6,
                               waiting_room = $7, admission_ttl_s = $8, proof_of_work = $9, continue_url = $10
          WHERE id = $1`,
          [
            productId,
            after.name,
            after.limitPerUser,
            after.startsAt,
            after.endsAt,
            after.paymentTimeoutS,
            after.waitingRoom,
            after.admissionTtlS,
            after.proofOfWork,
            after.continueUrl,
          ],
        );
        if (after.waitingRoom) await this.openWaitingRoom(tx, productId);
        const view = await this.viewIn(tx, productId);
        if (!sameTime(before.startsAt, view.startsAt) || !sameTime(before.endsAt, view.endsAt))
          await writeProductEvent(tx, productId, 'product.window_changed', {
            startsAt: view.startsAt,
            endsAt: view.endsAt,
            before: { startsAt: before.startsAt, endsAt: before.endsAt },
          });
        return view;
      }),
    );
  }

  /**
   * Adds units, filled into the smallest segments so that their sizes end as even as possible,
   * under the same row locks as a rebalance (bounded by REBALANCE_WAIT_MS: BUSY, nothing added).
   * Answers the view after, the layout version and the segments that got units.
   */
  restock(productId: number, units: number): Promise<{ view: ProductView; layoutVersion: number; filled: number[] }> {
    return this.guard(() =>
      this.db.transaction(async (tx) => {
        await this.boundLockWaits(tx);
        const [product] = await tx.query<Array<{ layout_version: number }>>(
          'SELECT layout_version FROM products WHERE id = $1 FOR NO KEY UPDATE',
          [productId],
        );
        if (!product) throw new ProductNotFoundError(productId);
        const segs = await tx.query<Array<{ idx: number; stock: string }>>(
          'SELECT idx, stock FROM stock_segments WHERE product_id = $1 ORDER BY idx FOR UPDATE',
          [productId],
        );
        const adds = fillEvenly(
          segs.map((r) => Number(r.stock)),
          units,
        );
        const filled = segs.map((r, i) => ({ idx: r.idx, add: adds[i] })).filter((f) => f.add > 0);
        await tx.query(
          `UPDATE stock_segments s SET stock = s.stock + v.add FROM unnest($2::int[], $3::bigint[]) AS v(idx, add)
            WHERE s.product_id = $1 AND s.idx = v.idx`,
          [productId, filled.map((f) => f.idx), filled.map((f) => f.add)],
        );
        await tx.query('UPDATE products SET total_stock = total_stock + $2 WHERE id = $1', [productId, units]);
        const view = await this.viewIn(tx, productId);
        await writeProductEvent(tx, productId, 'product.restocked', {
          units,
          stock: view.stock,
          stocked: view.stocked,
          segments: view.segments,
        });
        return {
          view,
          layoutVersion: product.layout_version,
          filled: filled.map((f) => f.idx),
        };
      }),
    );
  }

  /**
   * Locks every segment row and redistributes the remaining units evenly over `segments` (default:
   * the current count); the layout version goes up by one. Answers the views before and after and
   * the version before. Why row locks and not the Redis segment locks: InventoryService.rebalance.
   */
  rebalance(
    productId: number,
    segments?: number,
  ): Promise<{ before: ProductView; after: ProductView; oldVersion: number }> {
    return this.guard(() =>
      this.db.transaction(async (tx) => {
        await this.boundLockWaits(tx);
        // NO KEY UPDATE: order inserts hold KEY SHARE on the product (foreign key) while they hold a
        // segment row; a plain FOR UPDATE here would deadlock with them. Returns of units hold it
        // FOR SHARE, so no return runs while segments are rewritten.
        const [product] = await tx.query<
          Array<{
            layout_version: number;
            segment_count: number;
          }>
        >('SELECT layout_version, segment_count FROM products WHERE id = $1 FOR NO KEY UPDATE', [productId]);
        if (!product) throw new ProductNotFoundError(productId);
        const target = segments ?? product.segment_count;
        await tx.query('SELECT idx FROM stock_segments WHERE product_id = $1 ORDER BY idx FOR UPDATE', [productId]);
        const before = await this.viewIn(tx, productId);
        await tx.query('DELETE FROM stock_segments WHERE product_id = $1 AND idx >= $2', [productId, target]);
        await this.writeSegments(tx, productId, evenSplit(before.stock, target));
        await tx.query('UPDATE products SET segment_count = $2, layout_version = layout_version + 1 WHERE id = $1', [
          productId,
          target,
        ]);
        const after = await this.viewIn(tx, productId);
        await writeProductEvent(tx, productId, 'product.rebalanced', {
          stock: after.stock,
          segmentsBefore: before.segments,
          segments: after.segments,
        });
        return { before, after, oldVersion: product.layout_version };
      }),
    );
  }

  /** Waiting longer than REBALANCE_WAIT_MS for a row lock fails with 55P03, answered as BUSY. */
  private async boundLockWaits(tx: EntityManager): Promise<void> {
    await tx.query(
      `SET LOCAL lock_timeout = ${Math.max(1, Math.min(this.inventory.rebalanceWaitMs, this.database.timeoutMs - 100))}`,
    );
  }

  private async writeSegments(tx: EntityManager, productId: number, sizes: number[]): Promise<void> {
    await tx.query(
      `INSERT INTO stock_segments (product_id, idx, stock)
       SELECT $1, i - 1, s FROM unnest($2::bigint[]) WITH ORDINALITY AS t(s, i)
       ON CONFLICT (product_id, idx) DO UPDATE SET stock = EXCLUDED.stock`,
      [productId, sizes],
    );
  }

  /**
   * The product's waiting room, made once: its pre-queue's lottery seed, whose SHA-256 is public
   * from now on, and the width of its buckets (QUEUE_BUCKET_MS). A room turned off and on again
   * keeps its seed (and its queue).
   */
  private async openWaitingRoom(tx: EntityManager, productId: number): Promise<void> {
    const seed = randomBytes(32);
    await tx.query(
      'INSERT INTO waiting_rooms (product_id, seed, seed_hash, bucket_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (product_id) DO NOTHING',
      [productId, seed, createHash('sha256').update(seed).digest('hex'), this.waitingRoom.bucketMs],
    );
  }

  private async viewIn(m: EntityManager, productId: number, lock = ''): Promise<ProductView> {
    const [p] = await m.query<
      Array<{
        id: number;
        name: string;
        total_stock: string;
        limit_per_user: number;
        segment_count: number;
        starts_at: Date | null;
        ends_at: Date | null;
        payment_timeout_s: number;
        waiting_room: boolean;
        admission_ttl_s: number;
        proof_of_work: boolean;
        continue_url: string | null;
      }>
    >(
      `SELECT id, name, total_stock, limit_per_user, segment_count, starts_at, ends_at, payment_timeout_s, waiting_room,
              admission_ttl_s, proof_of_work, continue_url
         FROM products WHERE id = $1 ${lock}`,
      [productId],
    );
    if (!p) throw new ProductNotFoundError(productId);
    const segs = await m.query<
      Array<{
        idx: number;
        stock: string;
      }>
    >('SELECT idx, stock FROM stock_segments WHERE product_id = $1 ORDER BY idx', [productId]);
    const [live] = await m.query<Array<{ reserved: string; paid: string }>>(
      `SELECT COALESCE(sum(quantity) FILTER (WHERE status = 'reserved'), 0) AS reserved, COALESCE(sum(quantity) FILTER (WHERE status = 'paid'), 0) AS paid
         FROM orders WHERE product_id = $1 AND status IN ('reserved', 'paid')`,
      [productId],
    );
    const segments = segs.map((s) => ({ index: s.idx, stock: Number(s.stock) }));
    const reserved = Number(live.reserved);
    const paid = Number(live.paid);
    return {
      id: p.id,
      name: p.name,
      stocked: Number(p.total_stock),
      stock: segments.reduce((sum, s) => sum + s.stock, 0),
      sold: reserved + paid,
      reserved,
      paid,
      limitPerUser: p.limit_per_user,
      startsAt: p.starts_at,
      endsAt: p.ends_at,
      paymentTimeoutS: p.payment_timeout_s,
      waitingRoom: p.waiting_room,
      admissionTtlS: p.admission_ttl_s,
      proofOfWork: p.proof_of_work,
      continueUrl: p.continue_url,
      segmentCount: p.segment_count,
      segments,
    };
  }

  private async guard<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (err) {
      if (err instanceof DomainError) throw err;
      throw mapDatabaseError(err, this.http.retryAfterS);
    }
  }
}

/** Whether two optional instants are the same (a PATCH rewrites the row even when nothing changed). */
function sameTime(a: Date | null, b: Date | null): boolean {
  return (a?.getTime() ?? null) === (b?.getTime() ?? null);
}
