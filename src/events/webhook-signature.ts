// The webhook's signature: `Flashsale-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`
// with WEBHOOK_SECRET. The time is inside what is signed, so a receiver can refuse an old delivery
// replayed by whoever saw it (docs/events.md shows the check).
import { createHmac, timingSafeEqual } from 'node:crypto';

export const SIGNATURE_HEADER = 'flashsale-signature';

export function signatureHeader(secret: string, body: string, unixS: number): string {
  return `t=${unixS},v1=${hmac(secret, unixS, body)}`;
}

/**
 * What a receiver does: true when `header` signs `body` with `secret` and is at most `toleranceS`
 * old at `nowS`. Exported for the tests and the example receiver in the docs.
 */
export function verifySignature(secret: string, body: string, header: string, nowS: number, toleranceS = 300): boolean {
  const m = /^t=(\d{1,12}),v1=([0-9a-f]{64})$/.exec(header);
  if (!m) return false;
  const t = Number(m[1]);
  if (Math.abs(nowS - t) > toleranceS) return false;
  return timingSafeEqual(Buffer.from(m[2], 'hex'), Buffer.from(hmac(secret, t, body), 'hex'));
}

function hmac(secret: string, unixS: number, body: string): string {
  return createHmac('sha256', secret).update(`${unixS}.`).update(body).digest('hex');
}
