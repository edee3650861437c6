// One segment of a product's stock; each has its own Redis lock `lock:stock:<productId>:<idx>`.
import { Column, Entity, JoinColumn, ManyToOne, PrimaryColumn } from 'typeorm';
import { bigintAsNumber, ProductEntity } from './product.entity';

@Entity('stock_segments')
export class StockSegmentEntity {
  @PrimaryColumn({ name: 'product_id', type: 'integer' }) productId: number;
  @PrimaryColumn({ type: 'integer' }) idx: number;
  @Column({ type: 'bigint', transformer: bigintAsNumber }) stock: number;
  @ManyToOne(() => ProductEntity, (p) => p.segments) @JoinColumn({ name: 'product_id' }) product?: ProductEntity;
}
