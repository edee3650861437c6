// `npm run bench -- --help` answers before anything is built: bench/main.cjs reads the flag table
// with Node's type stripping. Run here with a PATH that holds node and nothing else, so a build (npm,
// nest, tsc) could not even start; and with no dist/ in sight, from a folder of its own.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

describe('npm run bench -- --help', () => {
  let dir: string;
  beforeAll(() => {
    // Only what the entry needs to answer: itself and the flag table.
    dir = mkdtempSync(join(tmpdir(), 'flashsale-bench-help-'));
    for (const file of ['main.cjs', 'cli.ts']) cpSync(join(__dirname, file), join(dir, 'bench', file));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const run = (...args: string[]) =>
    spawnSync(process.execPath, [join(dir, 'bench', 'main.cjs'), ...args], {
      cwd: dir,
      encoding: 'utf8',
      env: { PATH: dirname(process.execPath) },
    });

  it('prints every flag and exits 0 without building', () => {
    const r = run('--help');
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^Usage: npm run bench -- \[flags\]/);
    expect(r.stdout).toContain('--ports LOW-HIGH');
    expect(r.stdout).toContain('--quick');
    expect(r.stderr).not.toContain('building');
  });

  it('refuses an unknown flag with the usage, exit 2, without building', () => {
    const r = run('--no-such-flag');
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^Unknown option '--no-such-flag'/);
    expect(r.stderr).toContain('Usage: npm run bench');
    expect(r.stderr).not.toContain('building');
  });
});
