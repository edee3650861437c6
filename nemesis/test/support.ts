// Runs the built nemesis (dist/nemesis/cli.js) as a user does, and reads what it left: its exit
// code, its report, and whether anything of its world is still on this machine.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Report } from '../report';

const ROOT = join(__dirname, '..', '..');

export interface Ran {
  code: number | null;
  stderr: string;
  report: Report | null;
  out: string;
}

/** Runs `npm run nemesis -- <args>` as its built entry point; `onLine` sees each line it logs. */
export function runNemesisCli(
  args: string[],
  onLine: (line: string, child: ReturnType<typeof spawn>) => void = () => undefined,
): Promise<Ran> {
  const cli = join(ROOT, 'dist', 'nemesis', 'cli.js');
  if (!existsSync(cli)) throw new Error(`${cli} is missing: npm run nemesis:build`);
  const out = mkdtempSync(join(tmpdir(), 'nemesis-spec-'));
  const child = spawn(process.execPath, [cli, ...args, '--out', out], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  let pending = '';
  child.stderr?.on('data', (c: Buffer) => {
    stderr += c.toString();
    pending += c.toString();
    let i: number;
    while ((i = pending.indexOf('\n')) >= 0) {
      onLine(pending.slice(0, i), child);
      pending = pending.slice(i + 1);
    }
  });
  return new Promise((resolve) => {
    child.once('exit', (code) => {
      const file = join(out, 'report.json');
      const report = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Report) : null;
      resolve({ code, stderr, report, out });
    });
  });
}

/** Network namespaces and links of this machine whose names start with one of `names`. */
export function leftInNetwork(made: { bridge: string; namespaces: string[] }): string[] {
  const namespaces = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  const links = execFileSync('ip', ['-o', 'link', 'show'], { encoding: 'utf8' });
  return [
    ...made.namespaces.filter((n) => namespaces.split('\n').some((l) => l.split(' ')[0] === n)),
    ...(new RegExp(`: ${made.bridge}[:@]`).test(links) ? [made.bridge] : []),
  ];
}

/** The pids a run's world noted (<run>/world/*.pid) still alive after up to `ms` (a process takes a moment to go). */
export async function pidsLeft(out: string, ms = 15_000): Promise<number[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const left = pidsAlive(out);
    if (left.length === 0 || Date.now() > deadline) return left;
    await new Promise((r) => setTimeout(r, 200));
  }
}

function pidsAlive(out: string): number[] {
  const dir = join(out, 'world');
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith('.pid'))
    .map((f) => Number(readFileSync(join(dir, f), 'utf8')))
    .filter((pid) => pid > 0 && alive(pid));
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
