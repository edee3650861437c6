// The shapes of the ids the API takes, in one place for the DTOs and the door.

/** `userId`: 1-64 characters of [A-Za-z0-9_.:-] (a positive integer is kept as its decimal string). */
export const USER_ID_PATTERN = /^[A-Za-z0-9_.:-]{1,64}$/;
/** Largest productId and quantity (PostgreSQL integer). */
export const MAX_ID = 2_147_483_647;

/** A product id from a path, or NaN when it is not a positive integer up to MAX_ID. */
export function productIdFromPath(raw: string): number {
  const id = /^[1-9][0-9]{0,9}$/.test(raw) ? Number(raw) : NaN;
  return id <= MAX_ID ? id : NaN;
}
