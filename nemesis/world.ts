// The small world a run tests: PostgreSQL, Redis (three independent masters, the Redlock quorum of
// REDIS_LOCK_URLS; or a Redis Cluster with a replica per master, see cluster.ts) and three service
// processes, each in a network namespace of its own where the machine allows it. A service's links
// to PostgreSQL and to the quorum's masters go through proxies of its own (links.ts), so that a
// link can be slowed, and cut by the packet filter in the service's namespace (network.ts) or,
// without namespaces, by the proxy. And the shop's webhook receiver.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Node } from './client';
import type { Effects, Fault, Shape } from './faults';
import { Direction, Link } from './links';
import { Network } from './network';
import { PostgresServer, RedisServer } from './servers';
import { ServiceNode } from './services';

export type LinkMode = 'netns' | 'proxy';

export interface WorldOptions {
  dir: string;
  mode: LinkMode;
  /** The folder whose dist/ the services run (the project, or a planted copy). */
  root: string;
  fakeTime: boolean;
  services: number;
  env: Record<string, string>;
  /** Starts the shop's webhook receiver where the services reach the nemesis; its URL. */
  webhook: { start: (host: string) => Promise<string>; secret: string };
}

/** What a world's Redis is to the rest of the world: how it starts, what a service is told, its faults. */
export interface RedisSide {
  /** What the schedule may strike: the quorum's masters, or the Cluster's shards. */
  names(): string[];
  start(world: World, onStep: (what: string) => void): Promise<void>;
  /** A service's environment for Redis (its links opened through `link` where it has them). */
  env(
    service: string,
    link: (server: string, upstream: () => { host: string; port: number }) => Promise<Link>,
  ): Promise<Record<string, string>>;
  startFault(f: Fault): Promise<boolean>;
  /** Undoes a fault of its own; what it did, if there is something to say. */
  endFault(f: Fault): Promise<Record<string, unknown> | void>;
  /** Cuts (or heals) a service off one of `names()`. */
  cut(service: string, target: string, direction: Direction): Promise<void> | void;
  heal(service: string, target: string): Promise<void> | void;
  /** The servers a service reaches through a link of its own (that a slow link can slow). */
  linked(): string[];
  healAll(): void;
  pids(): number[];
  stop(): Promise<void>;
}

export class World {
  readonly services: ServiceNode[] = [];
  pg!: PostgresServer;
  network?: Network;
  /** Each service's link to each server: `<service>-><server>`. */
  readonly links = new Map<string, Link>();

  private constructor(
    readonly options: WorldOptions,
    readonly redis: RedisSide,
  ) {}

  /** The host address services reach the nemesis (and its proxies) at. */
  get hostAddress(): string {
    return this.network?.hostAddress ?? '127.0.0.1';
  }

  static async start(
    options: WorldOptions,
    redis: RedisSide,
    onStep: (what: string) => void = () => undefined,
  ): Promise<World> {
    const world = new World(options, redis);
    try {
      await world.build(onStep);
    } catch (err) {
      world.emergencyStop();
      await world.stop();
      throw err;
    }
    return world;
  }

  nodes(): Node[] {
    return this.services.map((s) => ({ name: s.name, url: s.url }));
  }

  service(name: string): ServiceNode {
    const s = this.services.find((x) => x.name === name);
    if (!s) throw new Error(`no service ${name}`);
    return s;
  }

  private async build(onStep: (what: string) => void): Promise<void> {
    mkdirSync(this.options.dir, { recursive: true });
    if (this.options.mode === 'netns') {
      this.network = Network.create();
      onStep(`network: bridge ${this.network.bridge} at ${this.network.hostAddress}`);
    }
    onStep('starting PostgreSQL and Redis');
    const [pg] = await Promise.all([
      PostgresServer.start(join(this.options.dir, 'pg'), this.options.dir),
      this.redis.start(this, onStep),
    ]);
    this.pg = pg;
    const webhookUrl = await this.options.webhook.start(this.hostAddress);
    for (let i = 0; i < this.options.services; i++) {
      const name = `s${i}`;
      const ns = this.network?.add(name);
      const link = async (server: string, upstream: () => { host: string; port: number }) => {
        const l = await Link.open(`${name}->${server}`, this.hostAddress, upstream);
        this.links.set(l.name, l);
        return l;
      };
      const pgLink = await link('pg', () => ({ host: '127.0.0.1', port: this.pg.port }));
      const pgUrl = new URL(this.pg.url);
      pgUrl.hostname = pgLink.host;
      pgUrl.port = String(pgLink.port);
      this.services.push(
        new ServiceNode({
          name,
          root: this.options.root,
          host: ns?.address ?? '127.0.0.1',
          port: ns ? 3000 : undefined,
          prefix: ns ? (this.network as Network).exec(name) : [],
          dir: this.options.dir,
          fakeTime: this.options.fakeTime,
          env: {
            ...this.options.env,
            DATABASE_URL: pgUrl.toString(),
            ...(await this.redis.env(name, link)),
            WEBHOOK_URL: webhookUrl,
            WEBHOOK_SECRET: this.options.webhook.secret,
          },
        }),
      );
    }
    writeFileSync(join(this.options.dir, 'network.json'), JSON.stringify(this.made()));
    // The first applies the migrations; the others then start together.
    onStep('starting the service processes');
    await this.services[0].start();
    await Promise.all(this.services.slice(1).map((s) => s.start()));
  }

  link(service: string, server: string): Link {
    const l = this.links.get(`${service}->${server}`);
    if (!l) throw new Error(`no link ${service}->${server}`);
    return l;
  }

  /** Cuts a service's link, one way or both: the packet filter in its namespace, else its proxy. */
  cutLink(service: string, server: string, direction: Direction): void {
    const l = this.link(service, server);
    if (this.network) this.network.cut(service, { host: l.host, port: l.port, direction });
    else l.hold(direction);
  }

  healLink(service: string, server: string): void {
    const l = this.link(service, server);
    if (this.network) this.network.heal(service, (c) => c.host === l.host && c.port === l.port);
    else l.release();
  }

  shape(lockTtlMs: number): Shape {
    return {
      services: this.services.map((s) => s.name),
      redis: this.redis.names(),
      links: ['pg', ...this.redis.linked()],
      lockTtlMs,
    };
  }

  pgUrl(): string {
    return this.pg.url;
  }

  logFiles(): Record<string, string> {
    return Object.fromEntries(this.services.map((s) => [s.name, s.logFile]));
  }

  pids(): number[] {
    return [...this.services.map((s) => s.pid).filter((p): p is number => p !== undefined), ...this.redis.pids()];
  }

  /** What the run made in the network (bridge, namespaces), for the report and for a check that it is gone. */
  made(): { bridge: string; namespaces: string[] } | null {
    return this.network ? { bridge: this.network.bridge, namespaces: this.network.names() } : null;
  }

  /**
   * Every cut healed, every link at full speed, every process running with the right time (a
   * process whose restart failed is started again).
   */
  async healAll(): Promise<void> {
    for (const l of this.links.values()) {
      l.release();
      l.slow(0);
    }
    for (const s of this.services) {
      this.network?.heal(s.name);
      s.resume();
      s.setClock(0);
    }
    this.redis.healAll();
    for (const s of this.services) if (!s.running) await s.start();
  }

  /** How each fault kind is done to this world and undone; the Redis kinds are its Redis side's. */
  effects(): Effects {
    const from = (f: Fault) => f.target.split('->')[0];
    return {
      start: async (f) => {
        const p = f.params;
        switch (f.kind) {
          case 'kill':
            return this.service(f.target).kill();
          case 'pause':
            return this.service(f.target).pause();
          case 'partition-pg':
            return this.cutLink(from(f), 'pg', p.direction as Direction);
          case 'partition-redis':
            for (const m of p.masters as string[]) await this.redis.cut(from(f), m, p.direction as Direction);
            return;
          case 'slow-link':
            return this.link(from(f), String(p.server)).slow(Number(p.delayMs));
          case 'clock':
            return this.service(f.target).setClock(Number(p.offsetS));
          case 'pg-restart':
            return this.pg.crash(f.ms);
          default:
            if (!(await this.redis.startFault(f))) throw new Error(`this world has no fault ${f.kind}`);
        }
      },
      end: async (f) => {
        switch (f.kind) {
          case 'kill':
            return this.service(f.target).start();
          case 'pause':
            return this.service(f.target).resume();
          case 'partition-pg':
            return this.healLink(from(f), 'pg');
          case 'partition-redis':
            for (const m of f.params.masters as string[]) await this.redis.heal(from(f), m);
            return;
          case 'slow-link':
            return this.link(from(f), String(f.params.server)).slow(0);
          case 'clock':
            return this.service(f.target).setClock(0);
          case 'pg-restart':
            return;
          default:
            return this.redis.endFault(f);
        }
      },
      healthy: (deadline) => allHealthy(this.nodes(), deadline),
    };
  }

  /**
   * For a run stopped by a signal or dying: kills the processes and removes the network at once,
   * synchronously.
   */
  emergencyStop(): void {
    const signal = (pid: number | undefined, sig: NodeJS.Signals) => {
      try {
        if (pid) process.kill(pid, sig);
      } catch {
        /* gone */
      }
    };
    for (const pid of this.pids()) signal(pid, 'SIGKILL');
    // PostgreSQL's immediate shutdown: its backends go with it.
    signal(this.pg?.pid, 'SIGQUIT');
    this.network?.cleanup();
  }

  async stop(): Promise<void> {
    await Promise.all(this.services.map((s) => s.stop().catch(() => undefined)));
    for (const l of this.links.values()) await l.close().catch(() => undefined);
    await this.redis.stop().catch(() => undefined);
    await this.pg?.destroy().catch(() => undefined);
    this.network?.cleanup();
  }
}

/** Three independent Redis masters on this machine; each service reaches each through a link of its own. */
export class QuorumRedis implements RedisSide {
  readonly masters: RedisServer[] = [];
  private world!: World;

  names(): string[] {
    return ['r0', 'r1', 'r2'];
  }

  linked(): string[] {
    return this.names();
  }

  async start(world: World): Promise<void> {
    this.world = world;
    this.masters.push(...(await Promise.all(this.names().map((n) => RedisServer.start(n, world.options.dir)))));
  }

  async env(
    _service: string,
    link: (server: string, upstream: () => { host: string; port: number }) => Promise<Link>,
  ): Promise<Record<string, string>> {
    const links = await Promise.all(this.masters.map((r) => link(r.name, () => ({ host: '127.0.0.1', port: r.port }))));
    const urls = links.map((l) => `redis://${l.host}:${l.port}`);
    return { REDIS_URL: urls[0], REDIS_LOCK_URLS: urls.join(',') };
  }

  master(name: string): RedisServer {
    const r = this.masters.find((x) => x.name === name);
    if (!r) throw new Error(`no redis ${name}`);
    return r;
  }

  async startFault(f: Fault): Promise<boolean> {
    switch (f.kind) {
      case 'redis-pause':
        this.master(f.target).pause();
        return true;
      case 'redis-restart':
        await this.master(f.target).restartEmpty(f.ms);
        return true;
      case 'redis-flush':
        await this.master(f.target).flush();
        return true;
      case 'redis-clock':
        await this.master(f.target).jumpClock(Number(f.params.jumpMs));
        return true;
      default:
        return false;
    }
  }

  endFault(f: Fault): Promise<void> {
    if (f.kind === 'redis-pause') this.master(f.target).resume();
    return Promise.resolve();
  }

  cut(service: string, target: string, direction: Direction): void {
    this.world.cutLink(service, target, direction);
  }

  heal(service: string, target: string): void {
    this.world.healLink(service, target);
  }

  healAll(): void {
    for (const r of this.masters) r.resume();
  }

  pids(): number[] {
    return this.masters.map((r) => r.pid).filter((p): p is number => p !== undefined);
  }

  async stop(): Promise<void> {
    await Promise.all(this.masters.map((r) => r.stop().catch(() => undefined)));
  }
}

/** Resolves true once every node answers GET /health with 200, false at the deadline. */
export async function allHealthy(nodes: Node[], deadline: number): Promise<boolean> {
  const pending = new Set(nodes);
  while (pending.size > 0) {
    if (Date.now() > deadline) return false;
    for (const n of [...pending]) if (await healthy(n.url)) pending.delete(n);
    if (pending.size > 0) await sleep(200);
  }
  return true;
}

export async function healthy(url: string): Promise<boolean> {
  try {
    const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) });
    await r.arrayBuffer();
    return r.status === 200;
  } catch {
    return false;
  }
}
