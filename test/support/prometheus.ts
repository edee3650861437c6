// A real Prometheus (Debian's `prometheus` package, from PATH) started by a spec: it scrapes the
// given targets every second, evaluates the given rules every second, keeps its data in a scratch
// folder and answers its HTTP API on a free port. `stop()` ends it and removes the folder.
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onFreePort } from '../../src/infrastructure/free-port';
import { PortTakenError } from '../../src/infrastructure/postgres-placement';
import { waitFor } from './wait';

export interface RunningPrometheus {
  url: string;
  /** An instant query; the result vector (or matrix) as the API answers it. */
  query(expr: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>>;
  /** The alerts as the API lists them (state pending or firing). */
  alerts(): Promise<Array<{ labels: Record<string, string>; state: string }>>;
  stop(): Promise<void>;
}

/** The binary, or a clear failure: CI installs the package (.ci/run); a spec never skips for its absence. */
export function prometheusBinary(name: 'prometheus' | 'promtool'): string {
  try {
    return execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim();
  } catch {
    throw new Error(`${name} is not on PATH: install Debian's prometheus package (apt-get install prometheus)`);
  }
}

/** On a free port, chosen again when another process takes it before Prometheus listens. */
export function startPrometheus(targets: string[], rules: string): Promise<RunningPrometheus> {
  return onFreePort(undefined, (port) => startOn(port, targets, rules));
}

async function startOn(port: number, targets: string[], rules: string): Promise<RunningPrometheus> {
  const dir = mkdtempSync(join(tmpdir(), 'flashsale-prometheus-'));
  writeFileSync(join(dir, 'rules.yml'), rules);
  writeFileSync(
    join(dir, 'prometheus.yml'),
    [
      'global:',
      '  scrape_interval: 1s',
      '  evaluation_interval: 1s',
      'rule_files:',
      `  - ${join(dir, 'rules.yml')}`,
      'scrape_configs:',
      '  - job_name: flashsale',
      '    static_configs:',
      `      - targets: [${targets.map((t) => `'${t}'`).join(', ')}]`,
      '',
    ].join('\n'),
  );
  const child: ChildProcess = spawn(
    prometheusBinary('prometheus'),
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr?.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-4000)));
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitFor(
      'prometheus to start',
      async () => {
        if (child.exitCode !== null) throw new Error(`prometheus exited with ${child.exitCode}`);
        return fetch(`${url}/-/ready`).then(
          (r) => r.ok,
          () => false,
        );
      },
      30_000,
      100,
    );
  } catch (err) {
    await stop();
    const said = `prometheus did not start (${(err as Error).message}): ${stderr}`;
    throw /address already in use/i.test(stderr) ? new PortTakenError(said) : new Error(said);
  }
  const api = async (path: string) => {
    const body = (await (await fetch(`${url}${path}`)).json()) as { status: string; data: any; error?: string };
    if (body.status !== 'success') throw new Error(`prometheus ${path}: ${body.error}`);
    return body.data;
  };
  const query = async (expr: string) => (await api(`/api/v1/query?query=${encodeURIComponent(expr)}`)).result;
  // Prometheus applies a new set of targets some seconds after it starts (its discovery is
  // throttled): wait for every target's first scrape.
  await waitFor(
    () => `prometheus to scrape ${targets.join(', ')}: ${stderr}`,
    async () => (await query('up == 1')).length >= targets.length,
    30_000,
    100,
  ).catch(async (err: unknown) => {
    await stop();
    throw err;
  });
  return { url, query, alerts: async () => (await api('/api/v1/alerts')).alerts, stop };
}
