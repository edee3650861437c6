// A secret is never printed: a service refusing its secrets at start names each variable and its
// rule, never the value; a service that runs prints none of the secrets it was given. The run-wide
// check (support/secret-leaks.ts, in the global teardown) greps every service log of the e2e run
// for every secret set; this spec also shows that the check finds a secret where there is one.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findLeaks } from './support/secret-leaks';
import { request, startService } from './support/service';

describe('secrets in logs and errors', () => {
  it('should refuse short secrets at start naming each variable and its rule, never its value', async () => {
    const refused = {
      ADMIN_TOKEN: 'shortsecre',
      SHOP_TOKEN: 'shop-secret',
      BUYER_JWT_SECRET: 'jwt-secret-too-short',
      ADMISSION_SECRET: 'admission-too-short',
      WEBHOOK_URL: 'https://shop.example/hook',
      WEBHOOK_SECRET: 'hook-too-short',
    };
    const failure = await startService(refused).then(
      async (svc) => {
        await svc.stop();
        return '';
      },
      (err: Error) => err.message,
    );
    expect(failure).toContain('Invalid configuration');
    for (const name of ['ADMIN_TOKEN', 'SHOP_TOKEN', 'BUYER_JWT_SECRET', 'ADMISSION_SECRET', 'WEBHOOK_SECRET'])
      expect(failure).toMatch(new RegExp(`${name} \\(value not shown\\): ${name} must be`));
    for (const [name, value] of Object.entries(refused))
      if (name !== 'WEBHOOK_URL') expect({ name, printed: failure.includes(value) }).toEqual({ name, printed: false });
  });

  it('should print none of the secrets of a running service, at debug, through refused calls', async () => {
    const secrets = {
      BUYER_JWT_SECRET: 'a-buyer-jwt-secret-of-32-characters-at-least',
      ADMISSION_SECRET: 'an-admission-secret-of-32-characters-at-least',
    };
    const svc = await startService({ ...secrets, LOG_LEVEL: 'debug' });
    try {
      // Refused credentials of every kind: the answers and the logs name no secret.
      for (const authorization of [`Bearer ${secrets.BUYER_JWT_SECRET}`, 'Bearer nope', 'Basic abc']) {
        const r = await request(svc.url, 'GET', '/orders/1', undefined, { authorization });
        expect(r.status).toBe(401);
        expect(r.text).not.toContain(secrets.BUYER_JWT_SECRET);
      }
    } finally {
      await svc.stop();
    }
    for (const value of Object.values(secrets)) expect(svc.output().includes(value)).toBe(false);
  });

  it('should find a secret in a log where one was printed (the check of the whole run can fail)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'leak-check-'));
    try {
      writeFileSync(join(dir, 'service-1.secrets.json'), JSON.stringify(['s3cret-value-for-the-check']));
      writeFileSync(join(dir, 'service-1.log'), 'a line\nADMIN_TOKEN="s3cret-value-for-the-check" refused\n');
      writeFileSync(join(dir, 'service-2.log'), 'nothing here\n');
      expect(findLeaks(dir)).toEqual({ logs: 2, secrets: 1, leaks: [{ log: 'service-1.log', secret: 's3cr...' }] });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
