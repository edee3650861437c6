// Names of the Redis lock keys; built only from validated ids.
export const lockKeys = {
  user: (userId: string) => `lock:order:${userId}`,
  segment: (productId: number, idx: number) => `lock:stock:${productId}:${idx}`,
};
