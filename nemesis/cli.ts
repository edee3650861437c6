// `npm run nemesis -- --minutes 10 --seed 42`: one run, its report printed and written to the run's
// folder (and, with --publish, to nemesis/results/latest.md and .json). Exit 0 when the checker found
// no anomaly, 1 when it did; with --plant, 0 when the checker found the planted bug, 1 when it did not.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { projectRoot } from '../src/infrastructure/project-root';
import { FAULT_KINDS, FaultKind } from './faults';
import { builtCopy, PLANTS } from './plant';
import { check } from './checker';
import { History } from './history';
import { buildReport, checkPart, markdown, Report } from './report';
import { runNemesis } from './run';

const USAGE = `Usage: npm run nemesis -- [--minutes N | --seconds N] [--seed N] [options]

  --minutes N, --seconds N  how long faults are played (default 60 s); the world's start, the
                            sell-out and the checks come on top
  --seed N                  the run's seed: the same seed plays the same faults (default: random)
  --world quorum|cluster    three Redis masters under Redlock (default), or a Redis Cluster with a
                            replica per master
  --links auto|netns|proxy  how links are cut: the packet filter in network namespaces (root), or
                            per-link proxies (default auto: namespaces where allowed)
  --faults k1,k2            only these kinds (${FAULT_KINDS.join(', ')})
  --buyers N                concurrent buyers (default 10)
  --sell-out S              the longest wait, in seconds, for the sale to sell out after the heal
                            (default: the faults' length, at least 180 and at most 300); a sale not
                            sold out by then is a liveness anomaly
  --plant NAME              run a copy of the service with a bug planted (${Object.keys(PLANTS).join(', ')});
                            exits 0 only if the checker finds it
  --out DIR                 where the history, snapshot, logs and report go
                            (default nemesis/results/tmp/seed-<seed>)
  --check DIR               make the checks again from a finished run's folder (its history,
                            snapshot, stream and deliveries), with this checker, and rewrite its report
  --publish                 also write the report to nemesis/results/latest.md and latest.json
                            (cluster.md with --world cluster, planted-<name>.md with --plant)
  -h, --help                this text
`;

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      minutes: { type: 'string' },
      seconds: { type: 'string' },
      seed: { type: 'string' },
      world: { type: 'string', default: 'quorum' },
      links: { type: 'string', default: 'auto' },
      faults: { type: 'string' },
      buyers: { type: 'string', default: '10' },
      'sell-out': { type: 'string' },
      plant: { type: 'string' },
      out: { type: 'string' },
      publish: { type: 'boolean', default: false },
      check: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  if (values.check) return checkAgain(values.check, values.publish);
  const lengthMs = values.minutes
    ? Number(values.minutes) * 60_000
    : values.seconds
      ? Number(values.seconds) * 1000
      : 60_000;
  const seed = values.seed !== undefined ? Number(values.seed) : Math.floor(Math.random() * 1_000_000);
  const bad = (what: string) => {
    throw new UsageError(`${what}\n\n${USAGE}`);
  };
  if (!Number.isFinite(lengthMs) || lengthMs < 10_000) bad('--minutes/--seconds: at least 10 seconds');
  if (!Number.isInteger(seed) || seed < 0) bad('--seed: a whole number from 0');
  if (values.world !== 'quorum' && values.world !== 'cluster') bad('--world: quorum or cluster');
  if (!['auto', 'netns', 'proxy'].includes(values.links)) bad('--links: auto, netns or proxy');
  const kinds = values.faults?.split(',').map((k) => k.trim()) as FaultKind[] | undefined;
  for (const k of kinds ?? []) if (!FAULT_KINDS.includes(k)) bad(`--faults: no fault ${k}`);
  if (values.plant && !PLANTS[values.plant]) bad(`--plant: no planted bug ${values.plant}`);
  // A bound, not a wait: the sale sells out in well under a minute on an idle machine, and the
  // check must hold on a loaded one too.
  const sellOutMs =
    values['sell-out'] !== undefined
      ? Number(values['sell-out']) * 1000
      : Math.max(180_000, Math.min(300_000, lengthMs));
  if (!Number.isFinite(sellOutMs) || sellOutMs < 5_000) bad('--sell-out: at least 5 seconds');
  const root = projectRoot(__dirname);
  const out =
    values.out ?? join(root, 'nemesis', 'results', 'tmp', `seed-${seed}${values.plant ? `-${values.plant}` : ''}`);
  const log = (line: string) => process.stderr.write(`nemesis: ${line}\n`);
  const serviceRoot = builtCopy(root, values.plant);
  const dropCopy = () => rmSync(serviceRoot, { recursive: true, force: true });
  process.on('exit', dropCopy);
  if (values.plant) log(`planted ${values.plant}: ${PLANTS[values.plant].what}`);
  let result: Awaited<ReturnType<typeof runNemesis>>;
  try {
    result = await runNemesis({
      seed,
      lengthMs,
      world: values.world as 'quorum' | 'cluster',
      links: values.links as 'auto' | 'netns' | 'proxy',
      root: serviceRoot,
      plant: values.plant,
      out,
      kinds,
      buyers: Number(values.buyers),
      sellOutMs,
      log,
    });
  } finally {
    // The copy's links (lua/, node_modules/) go, not what they point to.
    dropCopy();
  }
  const command = `npm run nemesis -- ${values.minutes ? `--minutes ${values.minutes}` : `--seconds ${Math.round(lengthMs / 1000)}`} --seed ${seed}${values.world !== 'quorum' ? ` --world ${values.world}` : ''}${values.plant ? ` --plant ${values.plant}` : ''}${values['sell-out'] !== undefined ? ` --sell-out ${values['sell-out']}` : ''}`;
  const report = buildReport(result, command);
  writeReport(report, out, values.publish);
  log(`run folder: ${out}`);
  return verdict(report, log);
}

/** The report in the run's folder, and with --publish under nemesis/results/ too; printed. */
function writeReport(report: Report, out: string, publish: boolean): void {
  const md = markdown(report);
  writeFileSync(join(out, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
  writeFileSync(join(out, 'report.md'), md);
  if (publish) {
    const dir = join(projectRoot(__dirname), 'nemesis', 'results');
    mkdirSync(dir, { recursive: true });
    const name = report.plant ? `planted-${report.plant}` : report.world === 'cluster' ? 'cluster' : 'latest';
    writeFileSync(join(dir, `${name}.json`), `${JSON.stringify(report, null, 2)}\n`);
    writeFileSync(join(dir, `${name}.md`), md);
  }
  process.stdout.write(`${md}\n`);
}

/** A finished run checked again: what it recorded is read back and given to this checker. */
function checkAgain(dir: string, publish: boolean): number {
  const read = (name: string) => readFileSync(join(dir, name), 'utf8');
  const lines = <T>(name: string): T[] =>
    existsSync(join(dir, name))
      ? read(name)
          .split('\n')
          .filter((l) => l.trim() !== '')
          .map((l) => JSON.parse(l) as T)
      : [];
  const before = JSON.parse(read('report.json')) as Report;
  const checked = check({
    entries: History.read(join(dir, 'history.jsonl')),
    snapshot: JSON.parse(read('snapshot.json')) as Parameters<typeof check>[0]['snapshot'],
    followed: lines('events.jsonl'),
    deliveries: lines('webhooks.jsonl'),
    liveness: before.liveness,
  });
  const report: Report = { ...before, ...checkPart(checked), checkedAgain: true };
  writeReport(report, dir, publish);
  return verdict(report, (line) => process.stderr.write(`nemesis: ${line}\n`));
}

/** The exit code: 0 when no anomaly was found, or, for a planted bug, when it was. */
function verdict(report: Report, log: (line: string) => void): number {
  const found = report.anomalies.count > 0;
  if (report.plant) {
    log(
      found
        ? `the checker found the planted bug (${report.anomalies.count} anomalies)`
        : 'the checker did NOT find the planted bug',
    );
    return found ? 0 : 1;
  }
  return found ? 1 : 0;
}

class UsageError extends Error {}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`${err instanceof UsageError ? err.message : ((err as Error).stack ?? String(err))}\n`);
    process.exit(2);
  },
);
