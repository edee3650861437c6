// The shapes of the ids the API takes, in one place for the DTOs and the door.

/** `userId`: 1-64 characters of [A-Za-z0-9_.:-] (a positive integer is kept as its decimal string). */
export const USER_ID_PATTERN = /^[A-Za-z0-9_.:-]{1,64}$/;
/** Largest productId and quantity (PostgreSQL integer). */
export const MAX_ID = 2_147_483_647;
