// The shapes of the ids the API takes, in one place for the DTOs, the door and the path pipes.
import { PipeTransform } from '@nestjs/common';
import { ValidationFailedError } from './domain-errors';

/** `userId`: 1-64 characters of [A-Za-z0-9_.:-] (a positive integer is kept as its decimal string). */
export const USER_ID_PATTERN = /^[A-Za-z0-9_.:-]{1,64}$/;
/** Largest productId and quantity (PostgreSQL integer). */
export const MAX_ID = 2_147_483_647;

/** A product id from a path, or NaN when it is not a positive integer up to MAX_ID. */
export function productIdFromPath(raw: string): number {
  const id = /^[1-9][0-9]{0,9}$/.test(raw) ? Number(raw) : NaN;
  return id <= MAX_ID ? id : NaN;
}

/** An order id as the service makes them: a positive bigint, without leading zeros (18 digits at most). */
export const ORDER_ID_PATTERN = /^[1-9][0-9]{0,17}$/;

/** `:id` of an order path: a malformed id is a bad request (400), not an unknown order. */
export class OrderIdPipe implements PipeTransform<string, string> {
  transform(raw: string): string {
    if (!ORDER_ID_PATTERN.test(raw)) throw new ValidationFailedError('the order id must be a positive integer');
    return raw;
  }
}

/**
 * `:id` of a product path: a positive integer up to MAX_ID, else a bad request (400). It hands on
 * the text: a parameter typed `number` would be converted by the global ValidationPipe first
 * (`1e3` becoming 1000) before this pipe could see what was sent.
 */
export class ProductIdPipe implements PipeTransform<string, string> {
  transform(raw: string): string {
    if (Number.isNaN(productIdFromPath(raw)))
      throw new ValidationFailedError(`the product id must be an integer from 1 to ${MAX_ID}`);
    return raw;
  }
}
