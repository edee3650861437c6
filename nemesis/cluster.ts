// The second world's Redis: a Redis Cluster of three masters with a replica each
// (REDIS_CLUSTER_NODES), six redis-servers from PATH. With namespaces each node has one of its own, so
// that a service can be cut off a master by the packet filter, and a replica off its master's
// replication stream: the fault the quorum world cannot stage, a master lost before the lock keys
// written to it reached its replica (cut the stream, let locks and fencing counters land on the
// master alone, SIGKILL it, promote the replica with CLUSTER FAILOVER TAKEOVER). Without namespaces
// the nodes share the loopback and only the pause of a master is played (a real failover when it
// outlasts cluster-node-timeout). Targets are shards (k0..k2: the slot ranges as first made), each
// resolved to its master of the moment.
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Redis from 'ioredis';
import type { Fault } from './faults';
import type { Direction } from './links';
import type { Namespace } from './network';
import { freePort } from '../src/infrastructure/free-port';
import type { RedisSide, World } from './world';

const NODE_TIMEOUT_MS = 2000;

class ClusterNode {
  proc?: ChildProcess;

  constructor(
    readonly name: string,
    readonly host: string,
    readonly port: number,
    private readonly dir: string,
    private readonly prefix: string[],
  ) {}

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  get address(): string {
    return `${this.host}:${this.port}`;
  }

  /** Starts (or starts again, keeping nodes.conf and so its id and role, not its keys). */
  async start(): Promise<void> {
    mkdirSync(this.dir, { recursive: true });
    const args = [
      ...this.prefix,
      'redis-server',
      '--port',
      String(this.port),
      '--bind',
      this.prefix.length ? '0.0.0.0' : '127.0.0.1',
      '--protected-mode',
      'no',
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      join(this.dir, 'nodes.conf'),
      '--cluster-node-timeout',
      String(NODE_TIMEOUT_MS),
      '--cluster-announce-ip',
      this.host,
      '--save',
      '',
      '--appendonly',
      'no',
      '--dir',
      this.dir,
    ];
    this.proc = spawn(args[0], args.slice(1), { stdio: 'ignore' });
    const deadline = Date.now() + 30_000;
    while (!(await this.ping())) {
      if (Date.now() > deadline) throw new Error(`cluster node ${this.name} did not answer within 30 s`);
      await sleep(100);
    }
  }

  async ping(): Promise<boolean> {
    return this.with((r) => r.ping()).then(
      () => true,
      () => false,
    );
  }

  signal(signal: NodeJS.Signals): void {
    try {
      this.proc?.kill(signal);
    } catch {
      /* gone */
    }
  }

  async kill(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((resolve) => p.once('exit', resolve));
    p.kill('SIGCONT');
    p.kill('SIGKILL');
    await exited;
  }

  async with<T>(work: (r: Redis) => Promise<T>): Promise<T> {
    const client = new Redis({
      host: this.host,
      port: this.port,
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      connectTimeout: 1000,
      commandTimeout: 2000,
      retryStrategy: () => null,
    });
    client.on('error', () => undefined);
    try {
      await client.connect();
      return await work(client);
    } finally {
      client.disconnect();
    }
  }
}

type Slots = Array<[number, number, [string, number, string], ...Array<[string, number, string]>]>;

export class ClusterRedis implements RedisSide {
  private readonly nodes: ClusterNode[] = [];
  private world!: World;
  /** The first slot of each shard, as the cluster was made. */
  private starts: number[] = [];
  /** The node each service's cut to a shard went to, for its heal. */
  private readonly cuts = new Map<string, ClusterNode>();
  /** The master a pause or failover struck, for its end. */
  private readonly struck = new Map<number, { master: ClusterNode; replica?: ClusterNode }>();

  names(): string[] {
    return ['k0', 'k1', 'k2'];
  }

  /** A service reaches the nodes directly (the Cluster tells it where they are): no link to slow. */
  linked(): string[] {
    return [];
  }

  async start(world: World, onStep: (what: string) => void): Promise<void> {
    this.world = world;
    const net = world.network;
    for (let i = 0; i < 6; i++) {
      const name = `c${i}`;
      const ns: Namespace | undefined = net?.add(name);
      const port = ns ? 6379 : await freePort();
      this.nodes.push(
        new ClusterNode(
          name,
          ns?.address ?? '127.0.0.1',
          port,
          join(world.options.dir, name),
          ns ? net!.exec(name) : [],
        ),
      );
    }
    await Promise.all(this.nodes.map((n) => n.start()));
    onStep('making a Redis Cluster: 3 masters, a replica each');
    execFileSync(
      'redis-cli',
      ['--cluster', 'create', ...this.nodes.map((n) => n.address), '--cluster-replicas', '1', '--cluster-yes'],
      {
        stdio: 'ignore',
      },
    );
    await this.settled(60_000);
    this.starts = (await this.slots()).map((r) => r[0]).sort((a, b) => a - b);
  }

  env(): Promise<Record<string, string>> {
    return Promise.resolve({ REDIS_CLUSTER_NODES: this.nodes.map((n) => `redis://${n.address}`).join(',') });
  }

  /** CLUSTER SLOTS as a live node answers it. */
  private async slots(): Promise<Slots> {
    for (const n of this.nodes) {
      try {
        return (await n.with((r) => r.call('CLUSTER', 'SLOTS'))) as Slots;
      } catch {
        /* the next node */
      }
    }
    throw new Error('no cluster node answers CLUSTER SLOTS');
  }

  private byAddress(host: string, port: number): ClusterNode {
    const n = this.nodes.find((x) => x.host === host && x.port === port);
    if (!n) throw new Error(`no cluster node at ${host}:${port}`);
    return n;
  }

  /** The shard's master now, and a replica of it. */
  private async shard(target: string): Promise<{ master: ClusterNode; replica?: ClusterNode }> {
    const start = this.starts[Number(target.slice(1))];
    const range = (await this.slots()).find((r) => r[0] <= start && start <= r[1]);
    if (!range) throw new Error(`no master serves slot ${start}`);
    const [, , master, ...replicas] = range;
    return {
      master: this.byAddress(master[0], master[1]),
      replica: replicas[0] ? this.byAddress(replicas[0][0], replicas[0][1]) : undefined,
    };
  }

  /** Waits until every running node says cluster_state:ok and every shard has its replica again. */
  private async settled(ms: number): Promise<void> {
    const deadline = Date.now() + ms;
    for (;;) {
      const states = await Promise.all(
        this.nodes.map((n) =>
          n
            .with((r) => r.call('CLUSTER', 'INFO'))
            .then(
              (i) => String(i),
              () => '',
            ),
        ),
      );
      const slots = await this.slots().catch(() => [] as Slots);
      if (
        states.every((s) => s.includes('cluster_state:ok')) &&
        slots.length === 3 &&
        slots.every((r) => r.length >= 4)
      )
        return;
      if (Date.now() > deadline) throw new Error('the Redis Cluster did not settle');
      await sleep(250);
    }
  }

  async startFault(f: Fault): Promise<boolean> {
    if (f.kind !== 'cluster-pause' && f.kind !== 'cluster-failover') return false;
    const s = await this.shard(f.target);
    this.struck.set(f.id, s);
    if (f.kind === 'cluster-pause') s.master.signal('SIGSTOP');
    else {
      if (!s.replica || !this.world.network) throw new Error(`shard ${f.target} has no replica to promote`);
      // The replica hears nothing more from its master: what lands there from now on is the master's alone.
      this.world.network.cut(s.replica.name, { host: s.master.host, port: s.master.port, direction: 'in' });
    }
    return true;
  }

  async endFault(f: Fault): Promise<Record<string, unknown> | void> {
    const s = this.struck.get(f.id);
    if (!s) return;
    this.struck.delete(f.id);
    if (f.kind === 'cluster-pause') {
      s.master.signal('SIGCONT');
      await this.settled(60_000);
      return;
    }
    const replica = s.replica as ClusterNode;
    // Killed while it holds a segment lock where it can (within 2 s): the lock its replica never saw.
    await this.whileLocked(s.master, 2000).catch(() => undefined);
    const lost = await this.behind(s.master, replica).catch(() => null);
    await s.master.kill();
    await replica.with((r) => r.call('CLUSTER', 'FAILOVER', 'TAKEOVER'));
    this.world.network?.heal(replica.name);
    // The old master comes back empty, and rejoins as a replica of the one that took over.
    await s.master.start();
    await this.settled(60_000);
    return { master: s.master.name, promoted: replica.name, ...(lost ?? {}) };
  }

  /** Resolves once the node holds a segment lock, or after `ms`. */
  private async whileLocked(node: ClusterNode, ms: number): Promise<void> {
    await node.with(async (r) => {
      const deadline = Date.now() + ms;
      while (Date.now() < deadline) {
        const [, found] = await r.scan('0', 'MATCH', 'lock:stock:*', 'COUNT', 10_000);
        if (found.length > 0) return;
        await sleep(10);
      }
    });
  }

  /**
   * What the replica is missing when its master is killed: the segment locks held on the master
   * that the replica does not have, and the fencing counters it has lower (what the failover loses).
   */
  private async behind(
    master: ClusterNode,
    replica: ClusterNode,
  ): Promise<{ locksLost: number; countersBehind: number }> {
    const keys = await master.with(async (r) => {
      const found: string[] = [];
      let cursor = '0';
      do {
        const [next, page] = await r.scan(cursor, 'COUNT', 1000);
        cursor = next;
        found.push(...page.filter((k) => k.startsWith('lock:stock:') || k.startsWith('fence:')));
      } while (cursor !== '0');
      return found;
    });
    // One GET per key (a Cluster node refuses a multi-key read across slots); a replica reads with READONLY.
    const read = (node: ClusterNode, readonly: boolean) =>
      node.with(async (r) => {
        if (readonly) await r.call('READONLY');
        const replies = (await keys.reduce((p, k) => p.get(k), r.pipeline()).exec()) ?? [];
        return replies.map(([err, v]) => (err ? null : (v as string | null)));
      });
    const [here, there] = await Promise.all([read(master, false), read(replica, true)]);
    let locksLost = 0;
    let countersBehind = 0;
    keys.forEach((k, i) => {
      if (k.startsWith('lock:') && there[i] !== here[i]) locksLost++;
      if (k.startsWith('fence:') && Number(there[i] ?? 0) < Number(here[i] ?? 0)) countersBehind++;
    });
    return { locksLost, countersBehind };
  }

  /** Cuts the service off the shard's master of the moment. */
  async cut(service: string, target: string, direction: Direction): Promise<void> {
    const s = await this.shard(target);
    this.cuts.set(`${service}->${target}`, s.master);
    this.world.network?.cut(service, { host: s.master.host, port: s.master.port, direction });
  }

  heal(service: string, target: string): void {
    const node = this.cuts.get(`${service}->${target}`);
    this.cuts.delete(`${service}->${target}`);
    if (node) this.world.network?.heal(service, (c) => c.host === node.host && c.port === node.port);
  }

  healAll(): void {
    for (const n of this.nodes) {
      n.signal('SIGCONT');
      this.world.network?.heal(n.name);
    }
  }

  pids(): number[] {
    return this.nodes.map((n) => n.pid).filter((p): p is number => p !== undefined);
  }

  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.kill()));
  }
}
