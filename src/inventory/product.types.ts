// What a product is to the code above the SQL: its terms as the order path caches them
// (ProductInfo), its full view for the admin API (ProductView), and the terms of a sale as the admin
// API sets them. The products and stock repositories produce these; services and controllers read them.

export interface ProductInfo {
  id: number;
  /** What buyers see it called (the waiting page's heading). */
  name: string;
  limitPerUser: number;
  segmentCount: number;
  layoutVersion: number;
  /** The sale window, epoch ms; null for open. */
  startsAt: number | null;
  endsAt: number | null;
  /** Sells only to buyers admitted from its queue (docs/waiting-room.md). */
  waitingRoom: boolean;
  /** How long an admission lasts, seconds. */
  admissionTtlS: number;
  /** Joining the queue needs a solved proof-of-work challenge (docs/proof-of-work.md); absent: off. */
  proofOfWork?: boolean;
  /** The shop's page admitted buyers continue to from the waiting page; null or absent: the page shows the token. */
  continueUrl?: string | null;
}

export interface ProductView {
  id: number;
  name: string;
  /** Units ever stocked: created plus restocked. */
  stocked: number;
  /** Units remaining in the segments. */
  stock: number;
  /** Units in live orders: reserved + paid. */
  sold: number;
  reserved: number;
  paid: number;
  limitPerUser: number;
  startsAt: Date | null;
  endsAt: Date | null;
  paymentTimeoutS: number;
  waitingRoom: boolean;
  admissionTtlS: number;
  proofOfWork: boolean;
  continueUrl: string | null;
  segmentCount: number;
  segments: Array<{ index: number; stock: number }>;
}

/** The terms of a sale: who may buy how much, when, how long a reservation waits for payment, and whether buyers queue first. */
export interface SaleTerms {
  name: string;
  limitPerUser: number;
  startsAt: Date | null;
  endsAt: Date | null;
  paymentTimeoutS: number;
  /** Sell only to buyers admitted from the product's queue. */
  waitingRoom: boolean;
  admissionTtlS: number;
  /** Joining the queue needs a solved proof-of-work challenge. */
  proofOfWork: boolean;
  /** Where the waiting page sends an admitted buyer (with the admission token); null for none. */
  continueUrl: string | null;
}

export interface NewProduct extends SaleTerms {
  stock: number;
  segments: number;
}
