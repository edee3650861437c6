// The service's log format, as an operator meets it: piped (a log collector), every line on stdout
// is one JSON object from the very first; on a terminal, readable coloured lines instead. At info the
// start says what an operator needs (where it listens, where to look); Nest's own lines about each
// module and route it assembled are debug.
import { ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { freePort } from '../src/infrastructure/free-port';
import { keepServiceLog } from '../harness/launcher';
import { ADMIN_TOKEN, request, testUrls } from './support/service';
import { waitFor } from './support/wait';

const root = join(__dirname, '..');
const main = join(root, 'dist', 'src', 'main.js');

interface Run {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
}

function launch(command: string, args: string[], env: Record<string, string>): Run {
  const { databaseUrl, redisUrl } = testUrls();
  let stdout = '';
  let stderr = '';
  const child = spawn(command, args, {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATABASE_URL: databaseUrl,
      REDIS_URL: redisUrl,
      ADMIN_TOKEN,
      HOST: '127.0.0.1',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  keepServiceLog(child, { ADMIN_TOKEN, ...env });
  child.stdout?.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
  return { child, stdout: () => stdout, stderr: () => stderr };
}

/** Resolves once `seen` holds for the output; fails with the output when the process exits or a minute passes. */
async function outputShows(run: Run, seen: (stdout: string) => boolean): Promise<void> {
  await waitFor(
    () => `the output:\n${run.stdout()}\n${run.stderr()}`,
    () => {
      if (run.child.exitCode !== null)
        throw new Error(`exited with ${run.child.exitCode}:\n${run.stdout()}\n${run.stderr()}`);
      return seen(run.stdout());
    },
    60_000,
    100,
  );
}

function stop(run: Run): Promise<void> {
  return new Promise((resolve) => {
    if (run.child.exitCode !== null || run.child.signalCode !== null) return resolve();
    const kill = setTimeout(() => run.child.kill('SIGKILL'), 20_000);
    run.child.once('exit', () => {
      clearTimeout(kill);
      resolve();
    });
    run.child.kill('SIGTERM');
  });
}

const lines = (text: string) => text.split('\n').filter((l) => l.trim() !== '');

/** The contexts of Nest's start-up lines: which modules it loaded and which routes it mapped. */
const NEST_ASSEMBLY = ['NestFactory', 'InstanceLoader', 'RoutesResolver', 'RouterExplorer', 'NestApplication'];

describe('log format', () => {
  let run: Run | undefined;
  afterEach(async () => run && (await stop(run)));

  it.each([1, 2])(
    'should print only JSON lines on a piped stdout, from Nest start-up to shutdown, with WORKERS=%i',
    async (workers) => {
      const port = await freePort();
      run = launch(process.execPath, [main], { PORT: String(port), WORKERS: String(workers), LOG_LEVEL: 'info' });
      await outputShows(run, (out) => out.includes('listening on'));
      expect((await request(`http://127.0.0.1:${port}`, 'GET', '/health/live')).status).toBe(200);
      await stop(run);

      const all = lines(run.stdout());
      const parsed = all.map((line) => {
        try {
          return JSON.parse(line) as { level?: number; time?: number; msg?: string; context?: string };
        } catch {
          throw new Error(`not a JSON line: ${line}\nwhole output:\n${run?.stdout()}`);
        }
      });
      for (const entry of parsed)
        expect(entry).toEqual(
          expect.objectContaining({ level: expect.any(Number), time: expect.any(Number), msg: expect.any(String) }),
        );
      // Nest's assembly (a line per module and per route, in every process) is not among them.
      expect(parsed.filter((e) => NEST_ASSEMBLY.includes(e.context ?? ''))).toEqual([]);
      expect(parsed).toContainEqual(
        expect.objectContaining({ context: 'Main', msg: expect.stringMatching(/^listening on .*\(\d+ process/) }),
      );
      // Then where to look: the operator page, the API docs and the metrics.
      expect(parsed).toContainEqual(
        expect.objectContaining({
          context: 'Main',
          msg: `operator page http://127.0.0.1:${port}/admin, API docs http://127.0.0.1:${port}/docs, metrics http://127.0.0.1:${port}/metrics`,
        }),
      );
      expect(parsed).toContainEqual(expect.objectContaining({ msg: expect.stringMatching(/^SIGTERM: /) }));
    },
  );

  it("should log requests and Nest's assembly only at debug, a request one JSON line with its id and without the Authorization header", async () => {
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    run = launch(process.execPath, [main], { PORT: String(port), LOG_LEVEL: 'info' });
    await outputShows(run, (out) => out.includes('listening on'));
    await request(base, 'GET', '/health/live', undefined, {
      'x-request-id': 'quiet-at-info',
      authorization: 'Bearer secret-at-info',
    });
    await stop(run);
    expect(run.stdout()).not.toContain('quiet-at-info');

    run = launch(process.execPath, [main], { PORT: String(port), LOG_LEVEL: 'debug' });
    await outputShows(run, (out) => out.includes('listening on'));
    await request(base, 'GET', '/health/live', undefined, {
      'x-request-id': 'seen-at-debug',
      authorization: 'Bearer secret-at-debug',
    });
    await outputShows(run, (out) => out.includes('request completed'));
    await stop(run);
    const completed = lines(run.stdout())
      .map(
        (l) =>
          JSON.parse(l) as {
            msg?: string;
            req?: { id?: string; headers?: Record<string, string> };
            res?: { statusCode?: number };
          },
      )
      .filter((e) => e.msg === 'request completed');
    expect(completed).toEqual([
      expect.objectContaining({
        req: expect.objectContaining({ id: 'seen-at-debug' }),
        res: expect.objectContaining({ statusCode: 200 }),
      }),
    ]);
    expect(completed[0].req?.headers?.authorization).toBe('[Redacted]');
    expect(run.stdout()).not.toContain('secret-at-debug');
    // Nest's assembly is there at debug (pino's level 20), route by route.
    const assembly = lines(run.stdout())
      .map((l) => JSON.parse(l) as { level?: number; context?: string; msg?: string })
      .filter((e) => NEST_ASSEMBLY.includes(e.context ?? ''));
    expect(assembly).toContainEqual(
      expect.objectContaining({ level: 20, context: 'RouterExplorer', msg: 'Mapped {/orders, POST} route' }),
    );
    expect(assembly.every((e) => e.level === 20)).toBe(true);
  });

  it('should print coloured, readable lines when stdout is a terminal', async () => {
    const port = await freePort();
    // script(1) runs the service on a pseudo-terminal and copies what it prints to our pipe.
    run = launch(
      'script',
      ['-q', '-f', '-e', '-c', `${JSON.stringify(process.execPath)} ${JSON.stringify(main)}`, '/dev/null'],
      {
        PORT: String(port),
        LOG_LEVEL: 'info',
      },
    );
    await outputShows(run, (out) => out.includes('listening on'));
    const listening = lines(run.stdout()).find((l) => l.includes('listening on')) ?? '';
    expect(() => JSON.parse(listening)).toThrow();
    // eslint-disable-next-line no-control-regex
    expect(listening).toMatch(/\u001b\[\d+m/);
    // eslint-disable-next-line no-control-regex
    expect(listening.replace(/\u001b\[\d+m/g, '')).toMatch(/INFO.*\[Main\] listening on 127\.0\.0\.1:\d+/);
  });
});
