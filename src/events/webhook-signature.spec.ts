import { createHmac } from 'node:crypto';
import { signatureHeader, verifySignature } from './webhook-signature';

const SECRET = 'a-webhook-secret-of-at-least-32-chars';

describe('webhook signatures', () => {
  it('sign the time and the body with HMAC-SHA256, as a receiver can recompute', () => {
    const body = '{"events":[]}';
    const expected = createHmac('sha256', SECRET).update(`1700000000.${body}`).digest('hex');
    expect(signatureHeader(SECRET, body, 1_700_000_000)).toBe(`t=1700000000,v1=${expected}`);
  });

  it('verify a fresh signature of the same body and secret only', () => {
    const body = '{"events":[{"type":"order.paid"}]}';
    const header = signatureHeader(SECRET, body, 1000);
    expect(verifySignature(SECRET, body, header, 1100)).toBe(true);
    expect(verifySignature(SECRET, body + ' ', header, 1100)).toBe(false);
    expect(verifySignature(`${SECRET}x`, body, header, 1100)).toBe(false);
    expect(verifySignature(SECRET, body, header.replace('t=1000', 't=1001'), 1100)).toBe(false);
    expect(verifySignature(SECRET, body, header, 1000 + 301)).toBe(false);
    expect(verifySignature(SECRET, body, 'v1=abc', 1000)).toBe(false);
  });
});
