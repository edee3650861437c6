// The throwaway Redis Cluster of the cluster specs and the benchmark
// (harness/embedded-redis-cluster.ts): it comes up with every slot served by its
// masters, serves keys on every master through an ioredis Cluster client, moves slots with their
// keys, keeps serving the other masters' slots while one is down, and leaves no process or folder
// behind; it starts the same way as an unprivileged user from a private working folder.
import { execFile } from 'node:child_process';
import { chmodSync, chownSync, cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Redis, { Cluster } from 'ioredis';
import { CLUSTER_SLOTS, EmbeddedRedisCluster, startEmbeddedRedisCluster } from '../../harness/embedded-redis-cluster';

const ROOT = join(__dirname, '..', '..');

/**
 * What the unprivileged child loads, copied to a folder every user can read: the launcher and the
 * service modules it requires (dist/), and the packages they require with their dependencies
 * (node_modules/). The checkout itself may sit where that user cannot enter: a root's clone inside
 * `mktemp -d` or /root (mode 0700), where a require() of the checkout's files fails with
 * MODULE_NOT_FOUND. Node's own binary (process.execPath) must be reachable: .ci/run installs it in
 * a world-readable folder.
 */
function readableCopyOfLauncher(): string {
  const dir = mkdtempSync(join(tmpdir(), 'flashsale-launcher-code-'));
  const launcher = join(ROOT, 'dist', 'harness', 'embedded-redis-cluster.js');
  if (!existsSync(launcher)) throw new Error(`${launcher} is missing: \`npm test\` builds it (npm run bench:build)`);
  cpSync(join(ROOT, 'dist', 'harness'), join(dir, 'dist', 'harness'), { recursive: true });
  cpSync(join(ROOT, 'dist', 'src', 'infrastructure'), join(dir, 'dist', 'src', 'infrastructure'), { recursive: true });
  const copied = new Set<string>();
  const copyPackage = (name: string) => {
    const from = join(ROOT, 'node_modules', name);
    // A dependency nested under its dependent's own node_modules came with the dependent's folder.
    if (copied.has(name) || !existsSync(from)) return;
    copied.add(name);
    cpSync(from, join(dir, 'node_modules', name), { recursive: true, dereference: true });
    const pkg = JSON.parse(readFileSync(join(from, 'package.json'), 'utf8')) as {
      dependencies?: Record<string, string>;
    };
    for (const dep of Object.keys(pkg.dependencies ?? {})) copyPackage(dep);
  };
  copyPackage('ioredis');
  const openToAll = (path: string) => {
    const entries = readdirSync(path, { withFileTypes: true });
    chmodSync(path, 0o755);
    for (const e of entries) {
      if (e.isDirectory()) openToAll(join(path, e.name));
      else if (e.isFile()) chmodSync(join(path, e.name), 0o644);
    }
  };
  openToAll(dir);
  return dir;
}

function gone(pid: number | undefined): boolean {
  try {
    process.kill(pid as number, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

describe('embedded Redis Cluster (launcher of the cluster specs and the benchmark)', () => {
  let cluster: EmbeddedRedisCluster;
  let client: Cluster;

  beforeAll(async () => {
    cluster = await startEmbeddedRedisCluster({ masters: 3 });
    client = new Cluster(
      cluster.urls.map((u) => ({ host: '127.0.0.1', port: Number(new URL(u).port) })),
      { redisOptions: { maxRetriesPerRequest: 1 } },
    );
  });
  afterAll(async () => {
    client?.disconnect();
    await cluster?.stop();
  });

  it('should come up with all 16384 slots served by its 3 masters, each reporting cluster_state:ok, and serve keys on every master', async () => {
    expect(cluster.nodes).toHaveLength(3);
    expect(cluster.urls).toEqual(cluster.nodes.map((n) => n.url));
    const map = await cluster.slotMap();
    expect(map.reduce((n, r) => n + r.end - r.start + 1, 0)).toBe(CLUSTER_SLOTS);
    expect(new Set(map.map((r) => r.id))).toEqual(new Set(cluster.nodes.map((n) => n.id)));
    for (const node of cluster.nodes) {
      expect((await cluster.slotsOf(node)).length).toBeGreaterThan(5000);
      expect(await onNode(node.url, (r) => r.call('CLUSTER', 'INFO'))).toMatch(
        /cluster_state:ok[\s\S]*cluster_size:3\b/,
      );
    }

    // Keys whose slots lie on every master, written and read back through the Cluster client.
    const keys = Array.from({ length: 30 }, (_, i) => `launcher:key:${i}`);
    const owners = await Promise.all(keys.map((k) => cluster.nodeOf(k)));
    expect(new Set(owners)).toEqual(new Set(cluster.nodes));
    await Promise.all(keys.map((k) => client.set(k, k)));
    expect(await Promise.all(keys.map((k) => client.get(k)))).toEqual(keys);
    // Each key sits on the master that serves its slot.
    for (const [i, key] of keys.entries()) expect(await onNode(owners[i].url, (r) => r.call('GET', key))).toBe(key);
  });

  it('should move slots with their keys to another master while a client keeps using them', async () => {
    const key = 'launcher:moved';
    await client.set(key, 'before');
    const from = await cluster.nodeOf(key);
    const to = cluster.nodes.find((n) => n !== from) as EmbeddedRedisCluster['nodes'][number];
    const slot = await cluster.slotOf(key);
    const slots = [slot, ...(await cluster.slotsOf(from)).filter((s) => s !== slot).slice(0, 99)];
    const fromBefore = (await cluster.slotsOf(from)).length;

    // Writes to the moving key go on throughout (ASK and MOVED redirects), and none is lost.
    let writes = 0;
    let moving = true;
    const writer = (async () => {
      while (moving) await client.set(key, `write-${++writes}`);
    })();
    await cluster.moveSlots(slots, to);
    moving = false;
    await writer;

    expect(await cluster.nodeOf(key)).toBe(to);
    expect((await cluster.slotsOf(from)).length).toBe(fromBefore - 100);
    expect((await cluster.slotsOf(to)).filter((s) => slots.includes(s))).toHaveLength(100);
    expect(await client.get(key)).toBe(`write-${writes}`);
    expect(writes).toBeGreaterThan(0);
    expect((await cluster.slotMap()).reduce((n, r) => n + r.end - r.start + 1, 0)).toBe(CLUSTER_SLOTS);
  });

  it('should keep serving the other masters after one is killed, and take it back as itself on restart', async () => {
    const victim = cluster.nodes[2];
    const others = cluster.nodes.filter((n) => n !== victim);
    const keys = Array.from({ length: 30 }, (_, i) => `launcher:survivor:${i}`);
    const owners = await Promise.all(keys.map((k) => cluster.nodeOf(k)));
    const survivors = keys.filter((_, i) => owners[i] !== victim);
    const id = victim.id;

    victim.kill('SIGKILL');
    expect(victim.running).toBe(false);
    // cluster-require-full-coverage no: the other masters go on serving their own slots.
    await cluster.waitUntilAgreed();
    for (const node of others)
      expect(await onNode(node.url, (r) => r.call('CLUSTER', 'INFO'))).toMatch(/cluster_state:ok/);
    await Promise.all(survivors.map((k) => client.set(k, 'alive')));
    expect(await Promise.all(survivors.map((k) => client.get(k)))).toEqual(survivors.map(() => 'alive'));

    await victim.restart();
    expect(victim.running).toBe(true);
    expect(victim.id).toBe(id);
    await cluster.waitUntilAgreed();
    expect((await cluster.slotsOf(victim)).length).toBeGreaterThan(0);
  });

  it('should leave no redis-server and no folder behind when stopped', async () => {
    const other = await startEmbeddedRedisCluster();
    const pids = other.nodes.map((n) => n.pid);
    expect(pids.every((p) => typeof p === 'number' && !gone(p))).toBe(true);
    expect(existsSync(other.dir)).toBe(true);
    other.nodes[0].kill('SIGKILL');
    await other.stop();
    expect(pids.filter((p) => !gone(p))).toEqual([]);
    expect(existsSync(other.dir)).toBe(false);
  });

  it('should start and stop the same way as an unprivileged user, from a private (0700) working folder outside the project', async () => {
    // As root the child runs as nobody; otherwise as the user running the tests (already unprivileged).
    const asRoot = process.getuid?.() === 0;
    const cwd = mkdtempSync(join(tmpdir(), 'flashsale-launcher-cwd-'));
    if (asRoot) chownSync(cwd, 65534, 65534);
    const code = readableCopyOfLauncher();
    try {
      const launcher = join(code, 'dist', 'harness', 'embedded-redis-cluster.js');
      const script = `require(${JSON.stringify(launcher)}).startEmbeddedRedisCluster().then(
        async (c) => { const ranges = (await c.slotMap()).length; await c.stop(); console.log(JSON.stringify({ uid: process.getuid(), ranges, dir: c.dir })); },
        (e) => { console.error(e.message); process.exit(1); })`;
      const node = [process.execPath, '-e', script];
      const [cmd, ...args] = asRoot
        ? ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--', ...node]
        : node;
      const { stdout } = await promisify(execFile)(cmd, args, { cwd, env: { PATH: process.env.PATH } });
      const result = JSON.parse(stdout.trim().split('\n').pop() as string);
      expect(result).toMatchObject({ ranges: 3 });
      expect(result.uid).not.toBe(0);
      expect(existsSync(result.dir)).toBe(false);
    } finally {
      rmSync(cwd, { recursive: true, force: true });
      rmSync(code, { recursive: true, force: true });
    }
  });
});

/** A plain connection to one node (no redirects followed). */
async function onNode<T>(url: string, work: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis(url, { maxRetriesPerRequest: 1 });
  try {
    return await work(r);
  } finally {
    r.disconnect();
  }
}
