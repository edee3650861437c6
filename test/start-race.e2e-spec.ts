// Two `npm start` at once in one fresh checkout (no dist/ yet), as two terminals, or a supervisor
// starting two instances, would run them: one builds while the other waits for it, then both serve;
// neither loads a dist/ that a build is rewriting under it ("TypeError: Class extends value
// undefined"). Then a start with dist/ up to date does not build at all. On a copy of the project
// with node_modules linked from this checkout, against the test run's PostgreSQL and Redis.
import { ChildProcess, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../src/infrastructure/free-port';
import { keepServiceLog } from '../harness/launcher';
import { ADMIN_TOKEN, SHOP_TOKEN, testUrls } from './support/service';
import { waitFor } from './support/wait';

const ROOT = join(__dirname, '..');

interface Start {
  child: ChildProcess;
  port: number;
  output(): string;
  /** npm ends by the SIGTERM it is sent, with no exit code to check (the drain on SIGTERM is sigterm.e2e-spec.ts's subject). */
  exited: Promise<number | null>;
}

/** `npm start` in `dir`, in a process group of its own so that npm, its shell and node stop together. */
async function npmStart(dir: string): Promise<Start> {
  const port = await freePort();
  const { databaseUrl, redisUrl } = testUrls();
  let out = '';
  const child = spawn('npm', ['start'], {
    cwd: dir,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      PORT: String(port),
      HOST: '127.0.0.1',
      DATABASE_URL: databaseUrl,
      REDIS_URL: redisUrl,
      ADMIN_TOKEN,
      SHOP_TOKEN,
      LOG_LEVEL: 'warn',
    },
  });
  keepServiceLog(child, { ADMIN_TOKEN, SHOP_TOKEN });
  child.stdout?.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, port, output: () => out, exited };
}

async function serving(start: Start, timeoutMs: number): Promise<void> {
  await waitFor(
    () => `npm start to serve:\n${start.output()}`,
    async () => {
      if (start.child.exitCode !== null)
        throw new Error(`npm start exited with ${start.child.exitCode} before serving:\n${start.output()}`);
      return (await fetch(`http://127.0.0.1:${start.port}/health/live`).catch(() => undefined))?.status === 200;
    },
    timeoutMs,
    250,
  );
}

async function stop(start: Start): Promise<void> {
  if (start.child.exitCode !== null || start.child.signalCode !== null || !start.child.pid) return;
  try {
    process.kill(-start.child.pid, 'SIGTERM');
  } catch {
    return;
  }
  const kill = setTimeout(() => {
    try {
      process.kill(-start.child.pid!, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }, 15_000);
  await start.exited;
  clearTimeout(kill);
}

/** How many times `npm run build` ran in a start's output (npm echoes each script it runs). */
const builds = (output: string) => output.match(/^> nest build$/gm)?.length ?? 0;

describe('npm start', () => {
  let dir: string;
  const starts: Start[] = [];

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'flashsale-start-race-'));
    for (const entry of [
      'src',
      'migrations',
      'lua',
      'scripts',
      'package.json',
      'tsconfig.json',
      'tsconfig.build.json',
      'nest-cli.json',
    ]) {
      cpSync(join(ROOT, entry), join(dir, entry), { recursive: true });
    }
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  });
  afterAll(async () => {
    await Promise.all(starts.map(stop));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('should build once and serve from both when two start at once in a checkout without dist/', async () => {
    expect(existsSync(join(dir, 'dist'))).toBe(false);
    const pair = await Promise.all([npmStart(dir), npmStart(dir)]);
    starts.push(...pair);
    // A build on a busy 2-core machine takes a minute or more.
    await Promise.all(pair.map((s) => serving(s, 240_000)));
    const outputs = pair.map((s) => s.output());
    expect(outputs.join('\n')).not.toMatch(/TypeError|Class extends value/);
    expect(outputs.map(builds).sort()).toEqual([0, 1]);
    expect(existsSync(join(dir, '.build.lock'))).toBe(false);
    // Stopped here, not only after the last test: the next start must find no build in flight.
    await Promise.all(pair.map(stop));
  });

  it('should start without building when dist/ is newer than every source', async () => {
    const again = await npmStart(dir);
    starts.push(again);
    await serving(again, 60_000);
    expect(builds(again.output())).toBe(0);
  });
});
