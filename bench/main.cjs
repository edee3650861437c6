// The entry of `npm run bench`, in plain JavaScript so that `--help` and a mistyped flag are answered
// at once, before anything is built: Node reads the flag table (bench/cli.ts, which imports nothing
// of the project) with its types stripped. Anything else builds the service and the benchmark
// (npm run bench:build) and runs dist/bench/run.js in this same process, so Ctrl-C reaches it once.
const { spawnSync } = require('node:child_process');
const { join } = require('node:path');
const { BENCH_FLAGS, benchHelp, readFlags } = require('./cli.ts');

const root = join(__dirname, '..');
const args = process.argv.slice(2);

class UsageError extends Error {}
let help = false;
try {
  help = readFlags(args, BENCH_FLAGS, UsageError).help === true;
} catch (err) {
  if (!(err instanceof UsageError)) throw err;
  process.stderr.write(`${err.message}\n\n${benchHelp()}`);
  process.exit(2);
}
if (help) {
  process.stdout.write(benchHelp());
  process.exit(0);
}

process.stderr.write('building the service and the benchmark (npm run bench:build) ...\n');
const build = spawnSync('npm', ['run', '-s', 'bench:build'], { cwd: root, stdio: 'inherit' });
if (build.status !== 0) process.exit(build.status ?? 1);
require(join(root, 'dist', 'bench', 'run.js'))
  .main()
  .then((code) => process.exit(code));
