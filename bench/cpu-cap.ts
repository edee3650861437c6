// Caps the CPU of the service's processes with a cgroup, where this machine lets the benchmark
// make one (root, and a cpu controller: cgroup v2's cpu.max or v1's cpu.cfs_quota_us). On one
// machine the load generator shares the cores with the service, and a service allowed every core
// answers faster than one generator can ask: capped, it can be driven past its capacity. The cap
// is made inside the benchmark's own cgroup, so whatever share that one has, the service keeps.
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const PERIOD_US = 100_000;

/** The cpu controller's folder of this process's cgroup, and its kind; null where there is none. */
function ownCgroup(): { dir: string; v2: boolean } | null {
  const lines = readFileSync('/proc/self/cgroup', 'utf8').trim().split('\n');
  const v1 = lines.map((l) => l.split(':')).find(([, ctl]) => ctl.split(',').includes('cpu'));
  if (v1 && existsSync('/sys/fs/cgroup/cpu')) return { dir: join('/sys/fs/cgroup/cpu', v1[2]), v2: false };
  const v2 = lines.find((l) => l.startsWith('0::'));
  const root = '/sys/fs/cgroup';
  if (
    v2 &&
    existsSync(join(root, 'cgroup.controllers')) &&
    readFileSync(join(root, 'cgroup.controllers'), 'utf8').includes('cpu')
  )
    return { dir: join(root, v2.slice(3)), v2: true };
  return null;
}

/** Moves `pids` into a new cgroup of `cores` cores; `release` moves them back and removes it. Throws where no cgroup can be made. */
export function capCpu(pids: number[], cores: number, name: string): { release: () => void } {
  const own = ownCgroup();
  if (own === null) throw new Error('no cpu cgroup controller here: run without --service-cores');
  const dir = join(own.dir, name);
  mkdirSync(dir, { recursive: true });
  const quota = Math.round(cores * PERIOD_US);
  if (own.v2) writeFileSync(join(dir, 'cpu.max'), `${quota} ${PERIOD_US}`);
  else {
    writeFileSync(join(dir, 'cpu.cfs_period_us'), String(PERIOD_US));
    writeFileSync(join(dir, 'cpu.cfs_quota_us'), String(quota));
  }
  for (const pid of pids) writeFileSync(join(dir, 'cgroup.procs'), String(pid));
  return {
    release: () => {
      const left = readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
      for (const pid of left) writeFileSync(join(own.dir, 'cgroup.procs'), pid);
      rmdirSync(dir);
    },
  };
}
