import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AlreadyRunningError, claimDataDir } from './data-dir-claim';

describe('one service per data folder', () => {
  let dir: string;
  const http = { port: 3000, host: '0.0.0.0' };
  const claimFile = () => join(dir, 'service.json');
  const holder = () => JSON.parse(readFileSync(claimFile(), 'utf8')) as { pid: number; port: number };

  beforeEach(() => {
    dir = join(mkdtempSync(join(tmpdir(), 'flashsale-claim-')), 'data');
  });
  afterEach(() => rmSync(join(dir, '..'), { recursive: true, force: true }));

  it('claims a folder nobody holds with its pid and port, and gives it up', () => {
    const release = claimDataDir(dir, http, () => false);
    expect(holder()).toEqual({ pid: process.pid, port: 3000, host: '0.0.0.0' });
    release();
    expect(existsSync(claimFile())).toBe(false);
  });

  it('refuses a folder a running service holds, naming its port and pid and never its PostgreSQL', () => {
    claimDataDir(dir, http, () => false)(); // makes the folder
    writeFileSync(claimFile(), JSON.stringify({ pid: 424242, port: 3005, host: '0.0.0.0' }));
    let refusal: unknown;
    try {
      claimDataDir(dir, { port: 3001, host: '0.0.0.0' }, (pid) => pid === 424242);
    } catch (err) {
      refusal = err;
    }
    expect(refusal).toBeInstanceOf(AlreadyRunningError);
    const message = (refusal as Error).message;
    expect(message).toContain('the service is already running on port 3005 (pid 424242)');
    expect(message).toContain('http://localhost:3005');
    expect(message).not.toMatch(/postgres/i);
    // The running service's claim stays as it was.
    expect(holder().pid).toBe(424242);
  });

  it('takes over a claim whose process is gone, and gives up only its own', () => {
    claimDataDir(dir, http, () => false)(); // makes the folder
    writeFileSync(claimFile(), JSON.stringify({ pid: 424242, port: 3005, host: '0.0.0.0' }));
    const release = claimDataDir(dir, http, () => false);
    expect(holder().pid).toBe(process.pid);

    writeFileSync(claimFile(), JSON.stringify({ pid: 434343, port: 3006, host: '0.0.0.0' }));
    release();
    expect(holder().pid).toBe(434343);
  });
});
