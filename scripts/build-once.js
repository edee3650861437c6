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
/** Written after a build that succeeded; a build that stopped half-way leaves none, so the next start builds again. */
const stamp = join(root, 'dist', '.built');
const inputs = ['src', 'migrations', 'package.json', 'tsconfig.json', 'tsconfig.build.json', 'nest-cli.json'];
const WAIT_MS = 10 * 60_000;

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

function fresh() {
  if (!existsSync(join(root, 'dist', 'src', 'main.js')) || !existsSync(stamp)) return false;
  return statSync(stamp).mtimeMs >= Math.max(...inputs.map((p) => newest(join(root, p))));
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

function main() {
  acquire();
  try {
    if (fresh()) return 0;
    rmSync(stamp, { force: true });
    const why = existsSync(join(root, 'dist', 'src', 'main.js')) ? 'the sources changed' : 'the first start';
    process.stderr.write(`building the service into dist/ (${why}): about a minute on 2 cores, once ...\n`);
    // Dated from before the build: a source saved while it ran is newer, and the next start builds again.
    const started = new Date();
    // npm_execpath: the npm that runs this script, so the build uses the same one.
    const npm = process.env.npm_execpath;
    const build = npm
      ? spawnSync(process.execPath, [npm, 'run', 'build'], { cwd: root, stdio: 'inherit' })
      : spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit' });
    if (build.error) throw build.error;
    if (build.status !== 0) return build.status ?? 1;
    process.stderr.write(`built in ${Math.round((Date.now() - started.getTime()) / 1000)} s\n`);
    writeFileSync(stamp, `built from the sources as they were at ${started.toISOString()}\n`);
    utimesSync(stamp, started, started);
    return 0;
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

process.exitCode = main();
