// A newcomer's first hour: the README's curl walkthrough, run by bash as it is written, against the
// built service started with the settings of .env.example (what `npm start` reads after the quick
// start's `cp .env.example .env`), on the test run's PostgreSQL and Redis. The tokens it names are
// .env.example's, and docker-compose.yml's defaults are the same, so it works against either start.
// Two things differ from a paste: the service's address (a free port, not 3000), and the buyer token
// comes from `node dist/src/cli/buyer-token.js`, what `npm run token` runs after its build step (which
// would build again here: `npm test` builds without build-once's stamp); the script's wiring is
// checked apart, below.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseEnv, promisify } from 'node:util';
import { ServiceProcess, startService } from './support/service';

const ROOT = join(__dirname, '..');
const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');
const example = parseEnv(read('.env.example'));

/** The README's walkthrough: the sh block that opens with the admin token. */
function walkthrough(): string {
  const readme = read('README.md');
  const start = readme.indexOf('```sh\nADMIN=');
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

  it('should run the walkthrough as written: a product made, a buyer token, an order paid, a restock and a rebalance', async () => {
    const script = walkthrough()
      .replaceAll('localhost:3000', svc.url.replace(/^http:\/\//, ''))
      .replaceAll('npm run -s token --', `node ${join(ROOT, 'dist', 'src', 'cli', 'buyer-token.js')}`);
    const { stdout } = await promisify(execFile)('bash', ['-euo', 'pipefail', '-c', script], {
      cwd: ROOT,
      // The secret as `.env` would give it (the checkout has no .env in CI); node is this run's node.
      env: {
        PATH: `${dirname(process.execPath)}:${process.env.PATH}`,
        HOME: process.env.HOME,
        BUYER_JWT_SECRET: example.BUYER_JWT_SECRET,
      },
      timeout: 60_000,
    });
    const answers = stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    // The payment, the restock, the rebalance and the product at the end.
    expect(answers).toHaveLength(4);
    expect(answers[0]).toMatchObject({ status: 'paid', userId: 'alice', quantity: 1 });
    expect(answers[1]).toMatchObject({ stocked: 1100, stock: 1099, paid: 1 });
    expect(answers[2]).toMatchObject({ before: { segmentCount: 20 }, after: { segmentCount: 10, stock: 1099 } });
    expect(answers[3]).toMatchObject({ name: 'sneaker', stocked: 1100, stock: 1099, sold: 1, segmentCount: 10 });
  });
});
