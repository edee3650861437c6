// A product on sale: its stock lives in stock_segments, `total_stock` is the units ever stocked.
import { Column, CreateDateColumn, Entity, OneToMany, PrimaryGeneratedColumn } from 'typeorm';
import { StockSegmentEntity } from './stock-segment.entity';

const bigintAsNumber = { to: (v: number) => v, from: (v: string | null) => (v === null ? null : Number(v)) };

@Entity('products')
export class ProductEntity {
  @PrimaryGeneratedColumn() id: number;
  @Column({ type: 'varchar', length: 200 }) name: string;
  @Column({ name: 'total_stock', type: 'bigint', transformer: bigintAsNumber }) totalStock: number;
  @Column({ name: 'limit_per_user', type: 'integer' }) limitPerUser: number;
  @Column({ name: 'segment_count', type: 'integer' }) segmentCount: number;
  @Column({ name: 'layout_version', type: 'integer' }) layoutVersion: number;
  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' }) createdAt: Date;
  @OneToMany(() => StockSegmentEntity, (s) => s.product) segments?: StockSegmentEntity[];
}

export { bigintAsNumber };
