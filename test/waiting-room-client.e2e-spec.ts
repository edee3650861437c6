// The README's storefront example (examples/waiting-room-client.mjs), run as a user would run it
// against a started service: it joins, polls as Retry-After says, orders with its admission, and
// exits 0; the order is in PostgreSQL with the admission it spent.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { resetState, withDb } from './support/database';
import { admin, request, ServiceProcess, startService } from './support/service';

const run = promisify(execFile);

describe('the example storefront client of the README', () => {
  let svc: ServiceProcess;
  beforeAll(async () => {
    await resetState();
    svc = await startService({ ADMISSION_TICK_MS: '50' });
  });
  afterAll(() => svc?.stop());

  it('joins the queue, waits its turn and orders with the admission', async () => {
    const created = await request(
      svc.url,
      'POST',
      '/admin/products',
      { name: 'example', stock: 3, segments: 1, waitingRoom: true },
      admin,
    );
    expect(created.status).toBe(201);
    const client = join(__dirname, '..', 'examples', 'waiting-room-client.mjs');
    const { stdout } = await run(process.execPath, [client, svc.url, String(created.body.id), 'reader-1'], {
      timeout: 60_000,
    });
    expect(stdout).toMatch(/^admitted: position 1/m);
    expect(stdout).toMatch(/^ordered: order \d+/m);
    // A figure the ticket does not have yet is said in words, never printed as "null".
    expect(stdout).not.toMatch(/null|undefined/);
    const orders = await withDb((db) =>
      db.query('SELECT user_id, admission_position::int AS position FROM orders WHERE product_id = $1', [
        created.body.id,
      ]),
    );
    expect(orders.rows).toEqual([{ user_id: 'reader-1', position: 1 }]);
  }, 90_000);
});
