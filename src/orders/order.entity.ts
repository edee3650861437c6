// An order: at most one per (product, user), enforced by the unique constraint orders_one_per_user.
import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';
import type { Allocation } from './orders.repository';

@Entity('orders')
export class OrderEntity {
  @PrimaryGeneratedColumn({ type: 'bigint' }) id: string;
  @Column({ name: 'product_id', type: 'integer' }) productId: number;
  @Column({ name: 'user_id', type: 'varchar', length: 64 }) userId: string;
  @Column({ type: 'integer' }) quantity: number;
  @Column({ type: 'jsonb' }) allocations: Allocation[];
  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' }) createdAt: Date;
}
