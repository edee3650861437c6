// How an order's quantity was taken: units per segment, stored in orders.allocations (jsonb).
export interface Allocation {
  segment: number;
  quantity: number;
}
