#!/usr/bin/env node
// `npm start`'s build step (prestart): builds dist/ only when it is missing or older than what it
// is built from, and never while another start in this checkout builds or is deciding to. Two
// starts at once used to run `nest build` twice: one rewrote dist/ while the other loaded it and
// died with "TypeError: Class extends value undefined". Here the first takes a lock (a directory:
// mkdir either creates it or fails, on every file system), builds if it must, and releases; the
// second waits for the lock, then finds dist/ fresh and goes on without building.
// lua/ is left out of the comparison: the service reads it at run time, the build does not use it.
'use strict';
const { spawnSync } = require('node:child_process');
const {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} = require('node:fs');
const { join } = require('node:path');

const root = join(__dirname, '..');
const lock = join(root, '.build.lock');
const WAIT_MS = 10 * 60_000;

/**
 * What can be built: the service (`npm run build`, always), and with --with-harness the test
 * harness too (`npm run build:harness`: what the specs run from dist/harness/), as `npm test` asks:
 * a harness build that found nothing changed would still rewrite files another jest may be
 * loading. Each has a stamp, written after a build that succeeded (a build that stopped half-way
 * leaves none, so the next call builds again).
 */
const targets = [
  {
    script: 'build',
    output: join(root, 'dist', 'src', 'main.js'),
    stamp: join(root, 'dist', '.built'),
    inputs: ['src', 'migrations', 'package.json', 'tsconfig.json', 'tsconfig.build.json', 'nest-cli.json'],
  },
  {
    script: 'build:harness',
    output: join(root, 'dist', 'harness', 'launcher.js'),
    stamp: join(root, 'dist', 'harness', '.built'),
    inputs: ['harness', 'src', 'package.json', 'tsconfig.json'],
  },
].slice(0, process.argv.includes('--with-harness') ? 2 : 1);

/** The newest modification time under `path` (a file or a folder), 0 when absent. */
function newest(path) {
  let s;
  try {
    s = statSync(path);
  } catch {
    return 0;
  }
  if (!s.isDirectory()) return s.mtimeMs;
  return readdirSync(path).reduce((max, name) => Math.max(max, newest(join(path, name))), s.mtimeMs);
}

function fresh(target) {
  if (!existsSync(target.output) || !existsSync(target.stamp)) return false;
  return statSync(target.stamp).mtimeMs >= Math.max(...target.inputs.map((p) => newest(join(root, p))));
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
}

/** Holder of the lock, or undefined when it has not written its pid yet. */
function holder() {
  try {
    return Number(readFileSync(join(lock, 'pid'), 'utf8')) || undefined;
  } catch {
    return undefined;
  }
}

function sleep(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function acquire() {
  const deadline = Date.now() + WAIT_MS;
  let said = false;
  for (;;) {
    try {
      mkdirSync(lock);
      writeFileSync(join(lock, 'pid'), String(process.pid));
      return;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
    }
    const pid = holder();
    // A start killed while it held the lock (Ctrl-C mid-build) must not block every later one.
    if (pid !== undefined && !alive(pid)) {
      rmSync(lock, { recursive: true, force: true });
      continue;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `waited ${WAIT_MS / 60_000} min for ${lock} (held by pid ${pid ?? 'unknown'}); remove it if no build is running`,
      );
    }
    if (!said) {
      process.stderr.write(`another start is building (${lock}); waiting for it\n`);
      said = true;
    }
    sleep(200);
  }
}

/** Builds `target` unless it is fresh; the build's exit code. */
function build(target) {
  if (fresh(target)) return 0;
  rmSync(target.stamp, { force: true });
  if (target.script === 'build') {
    const why = existsSync(target.output) ? 'the sources changed' : 'the first start';
    process.stderr.write(`building the service into dist/ (${why}): under half a minute on 2 cores, once ...\n`);
  }
  // Dated from before the build: a source saved while it ran is newer, and the next call builds again.
  const started = new Date();
  // npm_execpath: the npm that runs this script, so the build uses the same one.
  const npm = process.env.npm_execpath;
  const run = npm
    ? spawnSync(process.execPath, [npm, 'run', target.script], { cwd: root, stdio: 'inherit' })
    : spawnSync('npm', ['run', target.script], { cwd: root, stdio: 'inherit' });
  if (run.error) throw run.error;
  if (run.status !== 0) return run.status ?? 1;
  if (target.script === 'build')
    process.stderr.write(`built in ${Math.round((Date.now() - started.getTime()) / 1000)} s\n`);
  writeFileSync(target.stamp, `built from the sources as they were at ${started.toISOString()}\n`);
  utimesSync(target.stamp, started, started);
  return 0;
}

function main() {
  acquire();
  try {
    for (const target of targets) {
      const status = build(target);
      if (status !== 0) return status;
    }
    return 0;
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

process.exitCode = main();
