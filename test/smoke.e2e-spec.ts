import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createProduct, request, startService, ServiceProcess } from './support/service';
import { auditProduct, resetState, withDb } from './support/database';

describe('smoke', () => {
  let svc: ServiceProcess;
  // A temporary folder of its own, to see the service put its compile cache there
  // (infrastructure/compile-cache.ts; NODE_COMPILE_CACHE would turn the cache on by itself).
  const tmp = mkdtempSync(join(tmpdir(), 'smoke-tmp-'));
  beforeAll(async () => {
    await resetState();
    svc = await startService({ TMPDIR: tmp });
  });
  afterAll(async () => {
    if (svc) await svc.stop();
    rmSync(tmp, { recursive: true, force: true });
  });

  it('should sell one unit to one user', async () => {
    const p = await createProduct(svc.url, { stock: 5, segments: 2 });
    const res = await request(svc.url, 'POST', '/orders', { userId: 'u1', productId: p.id });
    expect(res.status).toBe(201);
    expect(await auditProduct(p.id)).toMatchObject({ totalStock: 5, remaining: 4, ordered: 1 });
  });

  it("should keep the compiled code of the modules it loaded in Node's compile cache once it listens", () => {
    // One folder per Node version, one file per module compiled: hundreds after a start.
    const cache = join(tmp, 'node-compile-cache');
    const files = readdirSync(cache, { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
    expect(files.length).toBeGreaterThan(500);
  });

  it("should find the test run's PostgreSQL storing its password with one SCRAM iteration (no key to derive per connection)", async () => {
    const stored = await withDb((db) =>
      db.query<{ rolpassword: string }>("SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres'"),
    );
    expect(stored.rows[0].rolpassword).toMatch(/^SCRAM-SHA-256\$1:/);
  });
});
