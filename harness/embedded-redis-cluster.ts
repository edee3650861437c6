// Harness (see harness/README.md): the throwaway Redis Cluster of the cluster specs (test/cluster/)
// and of the benchmark's Redis setups (bench/redis-setups.ts). The service never starts one, so this
// lives here and not in src/, and stays out of the service's build and image.
//
// N redis-server masters (no replicas) on free loopback ports, each in its own temporary folder,
// joined with `redis-cli --cluster create`. Nodes may be killed, stopped and restarted one by one,
// and hash slots moved between them while clients use the cluster (resharding).
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Redis from 'ioredis';
import { EmbeddedRedis, redisServerOnPath, startEmbeddedRedis } from '../src/infrastructure/embedded-redis';
import { freePort, onFreePort } from '../src/infrastructure/free-port';
import { EmbeddedServerError } from '../src/infrastructure/postgres-placement';

export const CLUSTER_SLOTS = 16384;

const INSTALL =
  'install Redis 7 or newer (Debian/Ubuntu: `sudo apt-get install redis-server`, which brings redis-cli; macOS: `brew install redis`)';

export interface StartClusterOptions {
  /** Masters, at least 3 (redis-cli refuses fewer); default 3. */
  masters?: number;
  /** cluster-node-timeout: how long a silent node takes to be suspected; default 1000 ms. */
  nodeTimeoutMs?: number;
  /** How long the cluster may take to agree on its slots; default 30 s. */
  readyTimeoutMs?: number;
}

export interface RedisClusterNode {
  port: number;
  url: string;
  /** The node's cluster id (CLUSTER MYID); it keeps it across restart(). */
  id: string;
  /** False once kill() (a signal that ends it) or stop() was called, until restart(). */
  readonly running: boolean;
  /** The redis-server's pid while it has one (also between kill() and stop()). */
  readonly pid: number | undefined;
  /** Sends `signal` (default SIGTERM) to the server: SIGKILL is a crash, SIGSTOP a freeze (SIGCONT thaws). */
  kill(signal?: NodeJS.Signals): void;
  /** Stops the server (SIGTERM, SIGKILL after 5 s). */
  stop(): Promise<void>;
  /** Starts it again on the same ports and folder: it rejoins with its id and slots, without its keys (no persistence). */
  restart(): Promise<void>;
}

export interface SlotRange {
  start: number;
  end: number;
  /** Id of the master that serves the range. */
  id: string;
}

export interface EmbeddedRedisCluster {
  /** The nodes' redis:// URLs, as REDIS_CLUSTER_NODES takes them. */
  urls: string[];
  nodes: RedisClusterNode[];
  /** The folder that holds each node's folder (nodes.conf); stop() removes it. */
  dir: string;
  /** The slot map as a running node reports it (CLUSTER SLOTS), sorted by start. */
  slotMap(): Promise<SlotRange[]>;
  /** The hash slot of a key (CLUSTER KEYSLOT: hash tags count as Redis counts them). */
  slotOf(key: string): Promise<number>;
  /** The node that serves a key's slot now. */
  nodeOf(key: string): Promise<RedisClusterNode>;
  /** Every slot `node` serves now, in order. */
  slotsOf(node: RedisClusterNode): Promise<number[]>;
  /**
   * Moves these slots to `to` with their keys, one at a time, as `redis-cli --cluster reshard` does
   * (SETSLOT IMPORTING / MIGRATING, MIGRATE in batches, SETSLOT NODE on every running master),
   * while clients go on using them (ASK and MOVED redirects); resolves once the running nodes agree.
   */
  moveSlots(slots: number[], to: RedisClusterNode): Promise<void>;
  /** Waits until every running node reports cluster_state:ok, knows every node and reports the same slot map covering all slots. */
  waitUntilAgreed(timeoutMs?: number): Promise<void>;
  /** Stops every node and removes their folders. */
  stop(): Promise<void>;
}

/** redis-cli from PATH answers --version. */
export function redisCliOnPath(): boolean {
  return spawnSync('redis-cli', ['--version'], { stdio: 'ignore' }).status === 0;
}

/** A short-lived connection to one node, for admin commands; fails fast when the node is down. */
async function withNode<T>(url: string, work: (client: Redis) => Promise<T>): Promise<T> {
  const client = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    connectTimeout: 2000,
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

function call<T>(client: Redis, ...args: Array<string | number>): Promise<T> {
  return client.call(String(args[0]), ...args.slice(1)) as Promise<T>;
}

/** CLUSTER SLOTS as sorted ranges (replicas, of which there are none, ignored). */
async function readSlotMap(client: Redis): Promise<SlotRange[]> {
  const reply = await call<Array<[number, number, [string, number, string]]>>(client, 'CLUSTER', 'SLOTS');
  return reply.map(([start, end, master]) => ({ start, end, id: master[2] })).sort((x, y) => x.start - y.start);
}

/** Runs redis-cli with `args`; resolves with its output, rejects with it when it exits non-zero. */
function redisCli(args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('redis-cli', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      reject(
        new EmbeddedServerError(
          err.code === 'ENOENT' ? `redis-cli is not on PATH: ${INSTALL}` : `could not run redis-cli: ${err.message}`,
        ),
      );
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else
        reject(
          new EmbeddedServerError(
            `redis-cli ${args.slice(0, 2).join(' ')} failed (${signal === 'SIGKILL' ? `no answer within ${timeoutMs / 1000} s` : `exit ${code ?? signal}`}):\n${out.trim()}`,
          ),
        );
    });
  });
}

/** One cluster node: its own folder (nodes.conf lives there) and fixed client and bus ports, so that it can restart as itself. */
class ClusterNode implements RedisClusterNode {
  id = '';
  private server?: EmbeddedRedis;
  private killed = false;

  constructor(
    readonly port: number,
    private readonly busPort: number,
    private readonly dir: string,
    private readonly nodeTimeoutMs: number,
  ) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.server !== undefined && !this.killed;
  }

  get pid(): number | undefined {
    return this.server?.process.pid;
  }

  async start(): Promise<void> {
    const args = [
      ...[
        '--dir',
        this.dir,
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        'nodes.conf',
        '--cluster-port',
        String(this.busPort),
      ],
      ...['--cluster-node-timeout', String(this.nodeTimeoutMs), '--cluster-require-full-coverage', 'no'],
    ];
    this.server = await startEmbeddedRedis({ port: this.port, extraArgs: args });
    this.killed = false;
    this.id = await withNode(this.url, (c) => call<string>(c, 'CLUSTER', 'MYID'));
  }

  kill(signal: NodeJS.Signals = 'SIGTERM'): void {
    this.server?.process.kill(signal);
    if (!['SIGSTOP', 'SIGCONT', 'SIGTSTP'].includes(signal)) this.killed = true;
  }

  /** Also waits for the exit of a server that kill() ended. */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    server?.process.kill('SIGCONT');
    await server?.stop();
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }
}

/** A node on two free ports (client and cluster bus), on others when one was taken before it listened. */
function startNode(dir: string, nodeTimeoutMs: number): Promise<ClusterNode> {
  return onFreePort(undefined, async (port) => {
    const node = new ClusterNode(port, await freePort(), dir, nodeTimeoutMs);
    await node.start();
    return node;
  });
}

export async function startEmbeddedRedisCluster(opts: StartClusterOptions = {}): Promise<EmbeddedRedisCluster> {
  const masters = opts.masters ?? 3;
  const nodeTimeoutMs = opts.nodeTimeoutMs ?? 1000;
  if (!Number.isInteger(masters) || masters < 3)
    throw new EmbeddedServerError(`a Redis Cluster needs at least 3 masters (asked: ${masters})`);
  if (!redisServerOnPath())
    throw new EmbeddedServerError(`no redis-server is on PATH, so no Redis Cluster can be started: ${INSTALL}`);
  if (!redisCliOnPath())
    throw new EmbeddedServerError(`no redis-cli is on PATH, so the Redis Cluster nodes cannot be joined: ${INSTALL}`);

  const root = mkdtempSync(join(tmpdir(), 'flashsale-redis-cluster-'));
  const removeRoot = () => rmSync(root, { recursive: true, force: true });
  // The servers are killed on exit by startEmbeddedRedis; their folders go too.
  process.on('exit', removeRoot);
  const nodes: ClusterNode[] = [];
  const stop = async () => {
    await Promise.all(nodes.map((n) => n.stop()));
    removeRoot();
    process.removeListener('exit', removeRoot);
  };

  const byId = (id: string) => nodes.find((n) => n.id === id);
  const anyRunning = () => {
    const node = nodes.find((n) => n.running);
    if (!node) throw new Error('no node of the Redis Cluster is running');
    return node;
  };
  const slotMap = () => withNode(anyRunning().url, readSlotMap);
  const slotOf = (key: string) => withNode(anyRunning().url, (c) => call<number>(c, 'CLUSTER', 'KEYSLOT', key));

  /** What keeps a node from being ready, or '' when it agrees with `expected`. */
  const disagreement = async (node: ClusterNode, expected: string): Promise<string> => {
    const info = await withNode(node.url, (c) => call<string>(c, 'CLUSTER', 'INFO'));
    if (!/cluster_state:ok/.test(info)) return `${node.port}: ${/cluster_state:\w+/.exec(info)?.[0]}`;
    if (!new RegExp(`cluster_known_nodes:${nodes.length}\\b`).test(info))
      return `${node.port}: ${/cluster_known_nodes:\d+/.exec(info)?.[0]}`;
    const map = JSON.stringify(await withNode(node.url, readSlotMap));
    return map === expected ? '' : `${node.port} sees slots ${map}`;
  };

  const waitUntilAgreed = async (timeoutMs = opts.readyTimeoutMs ?? 30_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      let why: string;
      try {
        const map = await slotMap();
        const covered = map.reduce((n, r) => n + r.end - r.start + 1, 0);
        const unknown = map.filter((r) => !byId(r.id));
        why =
          covered !== CLUSTER_SLOTS
            ? `${covered} of ${CLUSTER_SLOTS} slots covered`
            : unknown.length > 0
              ? `slots served by unknown node ${unknown[0].id}`
              : (await Promise.all(nodes.filter((n) => n.running).map((n) => disagreement(n, JSON.stringify(map)))))
                  .filter(Boolean)
                  .join('; ');
      } catch (err) {
        why = (err as Error).message;
      }
      if (!why) return;
      if (Date.now() > deadline)
        throw new EmbeddedServerError(`the Redis Cluster did not agree within ${timeoutMs / 1000} s: ${why}`);
      await sleep(50);
    }
  };

  /** One slot from `from` to `to`, keys and all; `clients` holds a connection to every running node. */
  const moveSlot = async (slot: number, from: ClusterNode, to: ClusterNode, clients: Map<ClusterNode, Redis>) => {
    const source = clients.get(from) as Redis;
    await call(clients.get(to) as Redis, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', from.id);
    await call(source, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', to.id);
    for (;;) {
      const keys = await call<string[]>(source, 'CLUSTER', 'GETKEYSINSLOT', slot, 100);
      if (keys.length === 0) break;
      await call(source, 'MIGRATE', '127.0.0.1', to.port, '', 0, 5000, 'REPLACE', 'KEYS', ...keys);
    }
    // The new owner first (it bumps its epoch and answers for the slot), then the old one, then the others.
    for (const node of [to, from, ...[...clients.keys()].filter((n) => n !== to && n !== from)])
      await call(clients.get(node) as Redis, 'CLUSTER', 'SETSLOT', slot, 'NODE', to.id);
  };

  const moveSlots = async (slots: number[], to: RedisClusterNode) => {
    const target = nodes.find((n) => n === to);
    if (!target?.running) throw new Error(`cannot move slots to node ${to.port}: it is not running`);
    const map = await slotMap();
    const running = nodes.filter((n) => n.running);
    const clients = new Map(
      running.map((n) => [
        n,
        new Redis(n.url, { maxRetriesPerRequest: 0, enableOfflineQueue: true, retryStrategy: () => null }),
      ]),
    );
    for (const c of clients.values()) c.on('error', () => undefined);
    try {
      for (const slot of slots) {
        const owner = byId(map.find((r) => r.start <= slot && slot <= r.end)?.id ?? '');
        if (!owner?.running) throw new Error(`slot ${slot} has no running owner`);
        if (owner !== target) await moveSlot(slot, owner, target, clients);
      }
    } finally {
      for (const c of clients.values()) c.disconnect();
    }
    await waitUntilAgreed();
  };

  const slotsOf = async (node: RedisClusterNode) =>
    (await slotMap())
      .filter((r) => r.id === node.id)
      .flatMap((r) => Array.from({ length: r.end - r.start + 1 }, (_, i) => r.start + i));

  try {
    nodes.push(
      ...(await Promise.all(
        Array.from({ length: masters }, (_, i) => startNode(mkdtempSync(join(root, `node-${i}-`)), nodeTimeoutMs)),
      )),
    );
    await redisCli(
      ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'],
      60_000,
    ).catch((err: Error) => {
      throw new EmbeddedServerError(`could not create the Redis Cluster: ${err.message}`);
    });
    await waitUntilAgreed();
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    urls: nodes.map((n) => n.url),
    nodes,
    dir: root,
    slotMap,
    slotOf,
    nodeOf: async (key) => {
      const slot = await slotOf(key);
      const range = (await slotMap()).find((r) => r.start <= slot && slot <= r.end);
      const node = range && byId(range.id);
      if (!node) throw new Error(`no node serves slot ${slot} of ${key}`);
      return node;
    },
    slotsOf,
    moveSlots,
    waitUntilAgreed,
    stop,
  };
}
