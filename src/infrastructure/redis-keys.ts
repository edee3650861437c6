// Names of the order path's Redis keys, built only from validated ids. A product's hints share its
// hash tag ({<productId>}), so on a Redis Cluster one script can read them all (one slot); a user's
// lock and a segment's lock hash on their own, spreading users and segments over the masters. A
// segment's fencing counter is tagged with its lock's whole key, so it lives in the lock's slot.
export const lockKeys = {
  user: (userId: string) => `lock:order:${userId}`,
  segment: (productId: number, idx: number) => `lock:stock:${productId}:${idx}`,
  segmentFence: (productId: number, idx: number) => `fence:{${lockKeys.segment(productId, idx)}}`,
};

export const hintKeys = {
  soldOut: (productId: number) => `hint:soldout:{${productId}}`,
  empty: (productId: number, layoutVersion: number) => `hint:empty:{${productId}}:${layoutVersion}`,
  generation: (productId: number) => `hint:stockgen:{${productId}}`,
};
