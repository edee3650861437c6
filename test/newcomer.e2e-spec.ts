// A newcomer's first hour: the README's walkthrough, run by bash as it is written, against the built
// service started with the settings of .env.example (what `npm start` reads after the quick start's
// `cp .env.example .env`, the door's rate limits included), on the test run's PostgreSQL and Redis,
// on a port that is not 3000: the walkthrough reads PORT, as a newcomer who started elsewhere sets
// it. The tokens it names are .env.example's, and docker-compose.yml's defaults are the same, so it
// works against either start. One thing differs from a paste: the buyer tokens come from
// `node dist/src/cli/buyer-token.js`, what `npm run token` runs after its build step (which would
// build here if a source was saved after the test run's build, under the run's feet); the script's
// wiring is checked apart, below.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseEnv, promisify } from 'node:util';
import { ServiceProcess, startService } from './support/service';

const ROOT = join(__dirname, '..');
const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');
const example = parseEnv(read('.env.example'));

/** The README's walkthrough: the sh block that opens with the service's address. */
function walkthrough(): string {
  const readme = read('README.md');
  const start = readme.indexOf('```sh\nBASE=');
  expect(start).toBeGreaterThan(0);
  return readme.slice(start + '```sh\n'.length, readme.indexOf('```', start + 5));
}

describe("a newcomer's first hour", () => {
  let svc: ServiceProcess;

  beforeAll(async () => {
    svc = await startService({
      ADMIN_TOKEN: example.ADMIN_TOKEN as string,
      SHOP_TOKEN: example.SHOP_TOKEN as string,
      BUYER_JWT_SECRET: example.BUYER_JWT_SECRET as string,
      // The door as a newcomer meets it: the defaults (docs/configuration.md), not the specs' "off".
      RATE_LIMIT_USER: '5,10',
      RATE_LIMIT_IP: '50,100',
    });
  });
  afterAll(async () => svc?.stop());

  it('should have the same tokens in .env.example, in docker-compose.yml and in the README walkthrough', () => {
    for (const name of ['ADMIN_TOKEN', 'SHOP_TOKEN', 'BUYER_JWT_SECRET']) expect(example[name]).toBeTruthy();
    const compose = read('docker-compose.yml');
    const defaults = (name: string) =>
      [...compose.matchAll(new RegExp(`\\$\\{${name}:?-([^}]*)\\}`, 'g'))].map((m) => m[1]);
    // The default service and the cluster profile's replicas.
    expect(defaults('ADMIN_TOKEN')).toEqual([example.ADMIN_TOKEN, example.ADMIN_TOKEN]);
    expect(defaults('SHOP_TOKEN')).toEqual([example.SHOP_TOKEN, example.SHOP_TOKEN]);
    expect(defaults('BUYER_JWT_SECRET')).toEqual([example.BUYER_JWT_SECRET, example.BUYER_JWT_SECRET]);
    const block = walkthrough();
    expect(block).toMatch(new RegExp(`^ADMIN=${example.ADMIN_TOKEN} `, 'm'));
    expect(block).toMatch(new RegExp(`^SHOP=${example.SHOP_TOKEN} `, 'm'));
    // `npm run token` reads .env as `npm start` does, and makes the token with the built command.
    const scripts = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts;
    expect(scripts.start).toContain('--env-file-if-exists=.env');
    expect(scripts.token).toMatch(/--env-file-if-exists=\.env dist\/src\/cli\/buyer-token\.js$/);
  });

  it('should name the service once, by PORT, so that a paste works on any port', () => {
    const block = walkthrough();
    expect(block.split('\n')[0]).toBe('BASE=http://localhost:${PORT:-3000}');
    // Every call goes to $BASE: no address written out again.
    expect(block.match(/localhost|127\.0\.0\.1|3000/g)).toEqual(['localhost', '3000']);
  });

  it("should run the walkthrough as written: an order paid, one cancelled, a restock, a rebalance, the events as a page and as a stream, an order through a waiting room, the queue's order verified", async () => {
    expect(svc.port).not.toBe(3000);
    const script = walkthrough()
      .replaceAll('npm run -s token --', `node ${join(ROOT, 'dist', 'src', 'cli', 'buyer-token.js')}`)
      .replaceAll('npm run -s verify-queue --', `node ${join(ROOT, 'dist', 'src', 'cli', 'verify-queue.js')}`);
    const { stdout } = await promisify(execFile)('bash', ['-euo', 'pipefail', '-c', script], {
      cwd: ROOT,
      // The secret as `.env` would give it (the checkout has no .env in CI); node is this run's node.
      env: {
        PATH: `${dirname(process.execPath)}:${process.env.PATH}`,
        HOME: process.env.HOME,
        BUYER_JWT_SECRET: example.BUYER_JWT_SECRET,
        PORT: String(svc.port),
      },
      timeout: 60_000,
    });
    const lines = stdout.trim().split('\n');
    const answers = lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, any>);
    const [paid, cancelled, restocked, rebalanced, product, page, roomOrder] = answers;
    expect(answers).toHaveLength(7);
    expect(paid).toMatchObject({ status: 'paid', userId: 'alice', quantity: 1 });
    expect(cancelled).toMatchObject({ status: 'cancelled', userId: 'bob', productId: paid.productId });
    // bob's unit came back at once: 1000 - alice's + the restock.
    expect(restocked).toMatchObject({ stocked: 1100, stock: 1099, paid: 1, reserved: 0 });
    expect(rebalanced).toMatchObject({ before: { segmentCount: 20 }, after: { segmentCount: 10, stock: 1099 } });
    expect(product).toMatchObject({ name: 'sneaker', stocked: 1100, stock: 1099, sold: 1, segmentCount: 10 });

    // The events, as a page and as a stream: the same ones, in the same order.
    const story = [
      'product.created',
      'order.reserved',
      'order.paid',
      'order.reserved',
      'order.cancelled',
      'product.restocked',
      'product.rebalanced',
    ];
    const paged = (page.events as Array<{ type: string; productId: number }>).map((e) => e.type);
    expect(paged.filter((t) => story.includes(t))).toEqual(story);
    expect((page.events as Array<{ productId: number }>).every((e) => e.productId === paid.productId)).toBe(true);
    const streamed = lines.filter((l) => l.startsWith('event: ')).map((l) => l.slice('event: '.length));
    expect(streamed).toEqual(paged);
    expect(lines).toContain('(stream closed by curl)');

    // Through the waiting room: an order made with alice's admission, and the queue's order verified
    // (the verifier exits 1 on a mismatch, which would have failed the script).
    expect(roomOrder).toMatchObject({ status: 'reserved', userId: 'alice', quantity: 1 });
    expect(roomOrder.productId).not.toBe(paid.productId);
    expect(lines).toContainEqual(expect.stringMatching(/^your ticket \S+: position 1, in .*: as drawn$/));
    expect(lines).toContain('OK: every draw is the one its committed seed makes');
  });
});
