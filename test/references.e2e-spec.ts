// Every file that the code, the specs and the docs name by path is a file a clone of the repository
// holds: a reader who follows a reference never lands on nothing. Runs on the tracked files only.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const root = join(__dirname, '..');
const TOP = ['src', 'test', 'bench', 'harness', 'lua', 'docs', 'migrations'];
/** A path under one of the project's folders that ends in a file name (no glob, no placeholder). */
const CITED = new RegExp(
  `(?<![\\w./-])(?:${TOP.join('|')})/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\\.(?:ts|lua|md|json|mjs|js)(?![\\w*])`,
  'g',
);

function trackedTextFiles(): string[] {
  const out = execFileSync('git', ['ls-files', '*.ts', '*.md', '*.mjs', '*.js', '*.yml', 'Dockerfile'], {
    cwd: root,
    encoding: 'utf8',
  });
  // The benchmark's generated reports quote paths of the machine that ran them.
  return out.split('\n').filter((f) => f && !f.startsWith('bench/results/'));
}

describe('references inside the repository', () => {
  it('should name only files that the repository holds', () => {
    const missing: string[] = [];
    for (const file of trackedTextFiles()) {
      const text = readFileSync(join(root, file), 'utf8');
      for (const [cited] of text.matchAll(CITED)) {
        if (!existsSync(join(root, cited))) missing.push(`${file}: ${cited}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('should not cite a design file from outside the repository', () => {
    const outside = trackedTextFiles().filter((file) =>
      /\.\.\/shared\/|DESIGN\.md/.test(readFileSync(join(root, file), 'utf8')),
    );
    expect(outside).toEqual([]);
  });
});
