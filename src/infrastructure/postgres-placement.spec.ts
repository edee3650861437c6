// Where the embedded PostgreSQL runs from and keeps its data, decided on a real temporary file tree.
// The kernel's "can that user run / enter this" answers need root and a second user, so they are
// given here; this process's own user stands in for `postgres`, so the chowns work without root.
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { dirname, join } from 'node:path';
import {
  EmbeddedServerError,
  exe,
  findPostgresBinaries,
  installBinaries,
  placePostgres,
  PostgresBinaries,
  relocatedDataDir,
  RunAs,
  sweepRelocatedData,
} from './postgres-placement';

describe('postgres placement', () => {
  let dir: string;
  let bins: PostgresBinaries;
  let shared: string;
  const me: RunAs = { user: 'postgres', uid: userInfo().uid, gid: userInfo().gid };

  beforeEach(() => {
    // A private folder (0700) holding a small stand-in of the package's native tree.
    dir = mkdtempSync(join(tmpdir(), 'placement-'));
    const native = join(dir, 'project', 'node_modules', 'pkg', 'native');
    mkdirSync(join(native, 'bin'), { recursive: true });
    mkdirSync(join(native, 'lib'), { recursive: true });
    writeFileSync(exe(native, 'postgres'), '#!/bin/sh\necho "postgres (PostgreSQL) 17"\n', { mode: 0o755 });
    writeFileSync(join(native, 'lib', 'libpq.so.5.17'), 'lib');
    symlinkSync('libpq.so.5.17', join(native, 'lib', 'libpq.so.5'));
    bins = { dir: native, version: '17.10.0-test' };
    shared = join(dir, 'shared');
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const reachable = { canRun: () => true, canEnter: () => true };
  const dataDir = () => join(dir, 'project', '.data', 'postgres');

  it('should keep binaries and data where they are for a non-root user', () => {
    const place = placePostgres({
      dataDir: dataDir(),
      persistent: true,
      runAs: null,
      binaries: bins,
      sharedRoot: shared,
    });
    expect(place).toMatchObject({ binDir: bins.dir, dataDir: dataDir(), runAs: undefined, notes: [] });
    expect(existsSync(shared)).toBe(false);
  });

  it('should keep binaries and data in place for root when the postgres user reaches both', () => {
    const place = placePostgres({
      dataDir: dataDir(),
      persistent: true,
      runAs: me,
      binaries: bins,
      sharedRoot: shared,
      checks: reachable,
    });
    expect(place).toMatchObject({ binDir: bins.dir, dataDir: dataDir(), notes: [] });
    // The data folder is made, private to the user who runs PostgreSQL, ready for initdb.
    expect(statSync(dataDir()).mode & 0o777).toBe(0o700);
    expect(existsSync(shared)).toBe(false);
  });

  it('should copy the binaries once to a versioned, world-readable folder when the postgres user cannot run them', () => {
    const ran: string[] = [];
    const checks = {
      canRun: (_as: RunAs | undefined, binDir: string) => (ran.push(binDir), binDir !== bins.dir),
      canEnter: () => true,
    };
    const place = placePostgres({
      dataDir: dataDir(),
      persistent: true,
      runAs: me,
      binaries: bins,
      sharedRoot: shared,
      checks,
    });
    const copy = join(shared, `postgresql-17.10.0-test-${process.platform}-${process.arch}`);
    expect(place.binDir).toBe(copy);
    expect(ran).toEqual([bins.dir, copy]);
    expect(place.notes.join()).toContain(`binaries run from a copy in ${copy}`);
    expect(readFileSync(exe(copy, 'postgres'), 'utf8')).toContain('(PostgreSQL) 17');
    expect(statSync(copy).mode & 0o755).toBe(0o755);
    expect(statSync(exe(copy, 'postgres')).mode & 0o755).toBe(0o755);
    expect(readlinkSync(join(copy, 'lib', 'libpq.so.5'))).toBe('libpq.so.5.17');
    // A second start reuses the copy instead of copying again.
    const inode = statSync(exe(copy, 'postgres')).ino;
    expect(installBinaries(bins, shared)).toBe(copy);
    expect(statSync(exe(copy, 'postgres')).ino).toBe(inode);
    expect(existsSync(`${copy}.partial-${process.pid}`)).toBe(false);
  });

  it('should refuse with a clear message when even the copied binaries cannot be run', () => {
    const checks = { canRun: () => false, canEnter: () => true };
    expect(() =>
      placePostgres({ dataDir: dataDir(), persistent: true, runAs: me, binaries: bins, sharedRoot: shared, checks }),
    ).toThrow(/postgres user, who runs PostgreSQL, cannot execute .*set DATABASE_URL/);
  });

  it('should keep the data in a folder the postgres user owns, linked from DATA_DIR, and find it again on the next start', () => {
    const checks = { canRun: () => true, canEnter: () => false };
    const first = placePostgres({
      dataDir: dataDir(),
      persistent: true,
      runAs: me,
      binaries: bins,
      sharedRoot: shared,
      checks,
    });
    const real = relocatedDataDir(dataDir(), shared);
    expect(first.dataDir).toBe(real);
    expect(real.startsWith(join(shared, 'data'))).toBe(true);
    expect(lstatSync(dataDir()).isSymbolicLink()).toBe(true);
    expect(readlinkSync(dataDir())).toBe(real);
    expect(statSync(real).mode & 0o777).toBe(0o700);
    expect(first.notes.join()).toContain(`data in ${real} (linked from ${dataDir()})`);
    writeFileSync(join(real, 'PG_VERSION'), '17\n');
    first.discard();

    const second = placePostgres({
      dataDir: dataDir(),
      persistent: true,
      runAs: me,
      binaries: bins,
      sharedRoot: shared,
      checks,
    });
    expect(second.dataDir).toBe(real);
    expect(readFileSync(join(real, 'PG_VERSION'), 'utf8')).toBe('17\n');
  });

  it('should keep the relocated data of a project moved with its link', () => {
    const checks = { canRun: () => true, canEnter: () => false };
    const before = placePostgres({
      dataDir: dataDir(),
      persistent: true,
      runAs: me,
      binaries: bins,
      sharedRoot: shared,
      checks,
    });
    const movedTo = join(dir, 'moved');
    renameSync(join(dir, 'project'), movedTo);
    const moved = join(movedTo, '.data', 'postgres');
    const after = placePostgres({
      dataDir: moved,
      persistent: true,
      runAs: me,
      binaries: bins,
      sharedRoot: shared,
      checks,
    });
    expect(after.dataDir).toBe(before.dataDir);
    expect(sweepRelocatedData(shared)).toEqual([]);
    expect(existsSync(before.dataDir)).toBe(true);
  });

  it('should give each DATA_DIR its own relocated folder', () => {
    expect(relocatedDataDir('/root/a/.data/postgres', shared)).toBe(relocatedDataDir('/root/a/.data/postgres', shared));
    expect(relocatedDataDir('/root/a/.data/postgres', shared)).not.toBe(
      relocatedDataDir('/root/b/.data/postgres', shared),
    );
  });

  it('should remove a throwaway relocated data folder and its link when discarded', () => {
    const checks = { canRun: () => true, canEnter: () => false };
    const place = placePostgres({
      dataDir: dataDir(),
      persistent: false,
      runAs: me,
      binaries: bins,
      sharedRoot: shared,
      checks,
    });
    writeFileSync(join(place.dataDir, 'PG_VERSION'), '17\n');
    place.discard();
    expect(existsSync(dirname(place.dataDir))).toBe(false);
    expect(() => lstatSync(dataDir())).toThrow();
  });

  it('should refuse to hide an existing data folder the postgres user cannot reach behind a link', () => {
    mkdirSync(dataDir(), { recursive: true });
    writeFileSync(join(dataDir(), 'PG_VERSION'), '17\n');
    const checks = { canRun: () => true, canEnter: () => false };
    const start = () =>
      placePostgres({ dataDir: dataDir(), persistent: true, runAs: me, binaries: bins, sharedRoot: shared, checks });
    expect(start).toThrow(EmbeddedServerError);
    expect(start).toThrow(
      /exists but the postgres user, who runs PostgreSQL, cannot reach it: move it away, set DATA_DIR/,
    );
    expect(readFileSync(join(dataDir(), 'PG_VERSION'), 'utf8')).toBe('17\n');
  });

  it('should sweep relocated data whose link is gone and keep data still linked', () => {
    const checks = { canRun: () => true, canEnter: () => false };
    const kept = placePostgres({
      dataDir: dataDir(),
      persistent: true,
      runAs: me,
      binaries: bins,
      sharedRoot: shared,
      checks,
    });
    const gone = join(dir, 'other', 'postgres');
    const orphan = placePostgres({
      dataDir: gone,
      persistent: true,
      runAs: me,
      binaries: bins,
      sharedRoot: shared,
      checks,
    });
    rmSync(join(dir, 'other'), { recursive: true });
    // An entry still being set up (no source file yet) is left alone.
    const settingUp = join(shared, 'data', 'fresh', 'postgres');
    mkdirSync(settingUp, { recursive: true });

    expect(sweepRelocatedData(shared)).toEqual([dirname(orphan.dataDir)]);
    expect(existsSync(kept.dataDir)).toBe(true);
    expect(existsSync(orphan.dataDir)).toBe(false);
    expect(existsSync(settingUp)).toBe(true);
  });

  it('should find the binaries package the way Node resolves it, and say how to install it when missing', () => {
    const found = findPostgresBinaries(__dirname);
    expect(existsSync(exe(found.dir, 'postgres'))).toBe(true);
    expect(found.version).toMatch(/^\d+\./);
    expect(() => findPostgresBinaries(dir)).toThrow(/are not installed: run `npm ci`, or set DATABASE_URL/);
  });
});
