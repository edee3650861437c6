// Redis keys of the bare-lua peer, shared with its audit. One script touches both keys of a
// product, so the hash tag {<productId>} keeps them in one slot should the peer meet a Redis Cluster.
export const luaPeerKeys = {
  stock: (productId: number) => `peer:stock:{${productId}}`,
  buyers: (productId: number) => `peer:buyers:{${productId}}`,
};
