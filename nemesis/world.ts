// The small world a run tests: PostgreSQL, three independent Redis masters (the Redlock quorum:
// REDIS_LOCK_URLS), three service processes, each in a network namespace of its own where the
// machine allows it; every link of a service to a server through a proxy of its own (links.ts), so
// that a link can be slowed, and cut by the packet filter in the service's namespace (network.ts)
// or, without namespaces, by the proxy. And the shop's webhook receiver.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Node } from './client';
import type { Effects, Shape } from './faults';
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

export class World {
  readonly services: ServiceNode[] = [];
  readonly redis: RedisServer[] = [];
  pg!: PostgresServer;
  network?: Network;
  /** Each service's link to each server: `<service>-><server>`. */
  private readonly links = new Map<string, Link>();

  private constructor(readonly options: WorldOptions) {}

  /** The host address services reach the nemesis (and its proxies) at. */
  get hostAddress(): string {
    return this.network?.hostAddress ?? '127.0.0.1';
  }

  static async start(options: WorldOptions, onStep: (what: string) => void = () => undefined): Promise<World> {
    const world = new World(options);
    try {
      await world.build(onStep);
    } catch (err) {
      await world.stop();
      throw err;
    }
    return world;
  }

  /** Servers the services depend on, by name: pg, r0, r1, r2. */
  serverNames(): string[] {
    return ['pg', ...this.redis.map((r) => r.name)];
  }

  nodes(): Node[] {
    return this.services.map((s) => ({ name: s.name, url: s.url }));
  }

  service(name: string): ServiceNode {
    const s = this.services.find((x) => x.name === name);
    if (!s) throw new Error(`no service ${name}`);
    return s;
  }

  redisServer(name: string): RedisServer {
    const r = this.redis.find((x) => x.name === name);
    if (!r) throw new Error(`no redis ${name}`);
    return r;
  }

  private async build(onStep: (what: string) => void): Promise<void> {
    mkdirSync(this.options.dir, { recursive: true });
    if (this.options.mode === 'netns') {
      this.network = Network.create();
      onStep(`network: bridge ${this.network.bridge} at ${this.network.hostAddress}`);
    }
    onStep('starting PostgreSQL and three Redis masters');
    const [pg, ...redis] = await Promise.all([
      PostgresServer.start(join(this.options.dir, 'pg')),
      ...[0, 1, 2].map((i) => RedisServer.start(`r${i}`)),
    ]);
    this.pg = pg;
    this.redis.push(...redis);
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
      const redisLinks = await Promise.all(
        this.redis.map((r) => link(r.name, () => ({ host: '127.0.0.1', port: r.port }))),
      );
      const pgUrl = new URL(this.pg.url);
      pgUrl.hostname = pgLink.host;
      pgUrl.port = String(pgLink.port);
      const redisUrls = redisLinks.map((l) => `redis://${l.host}:${l.port}`);
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
            REDIS_URL: redisUrls[0],
            REDIS_LOCK_URLS: redisUrls.join(','),
            WEBHOOK_URL: webhookUrl,
            WEBHOOK_SECRET: this.options.webhook.secret,
          },
        }),
      );
    }
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

  /** Cuts a service off a server, one way or both: the packet filter in its namespace, else its proxy. */
  cut(service: string, server: string, direction: Direction): void {
    const l = this.link(service, server);
    if (this.network) this.network.cut(service, { host: l.host, port: l.port, direction });
    else l.hold(direction);
  }

  heal(service: string, server: string): void {
    const l = this.link(service, server);
    if (this.network) this.network.heal(service, (c) => c.host === l.host && c.port === l.port);
    else l.release();
  }

  slow(service: string, server: string, ms: number): void {
    this.link(service, server).slow(ms);
  }

  /** Every cut healed, every link at full speed, every process running with the right time. */
  healAll(): void {
    for (const l of this.links.values()) {
      l.release();
      l.slow(0);
    }
    for (const s of this.services) {
      this.network?.heal(s.name);
      s.resume();
      s.setClock(0);
    }
    for (const r of this.redis) r.resume();
  }

  shape(lockTtlMs: number): Shape {
    return { services: this.services.map((s) => s.name), redis: this.redis.map((r) => r.name), lockTtlMs };
  }

  pgUrl(): string {
    return this.pg.url;
  }

  pids(): number[] {
    return this.services.map((s) => s.pid).filter((p): p is number => p !== undefined);
  }

  logFiles(): Record<string, string> {
    return Object.fromEntries(this.services.map((s) => [s.name, s.logFile]));
  }

  /** How each fault kind is done to this world and undone. */
  effects(): Effects {
    return {
      start: async (f) => {
        const p = f.params;
        switch (f.kind) {
          case 'kill':
            return this.service(f.target).kill();
          case 'pause':
            return this.service(f.target).pause();
          case 'partition-pg':
            return this.cut(f.target.split('->')[0], 'pg', p.direction as Direction);
          case 'partition-redis':
            for (const m of p.masters as string[]) this.cut(f.target.split('->')[0], m, p.direction as Direction);
            return;
          case 'slow-link':
            return this.slow(f.target.split('->')[0], String(p.server), Number(p.delayMs));
          case 'clock':
            return this.service(f.target).setClock(Number(p.offsetS));
          case 'redis-pause':
            return this.redisServer(f.target).pause();
          case 'redis-restart':
            return this.redisServer(f.target).restartEmpty(f.ms);
          case 'redis-flush':
            await this.redisServer(f.target).flush();
            return;
          case 'redis-clock':
            await this.redisServer(f.target).jumpClock(Number(p.jumpMs));
            return;
          case 'pg-restart':
            return this.pg.crash(f.ms);
          default:
            throw new Error(`the quorum world has no fault ${f.kind}`);
        }
      },
      end: async (f) => {
        switch (f.kind) {
          case 'kill':
            return this.service(f.target).start();
          case 'pause':
            return this.service(f.target).resume();
          case 'partition-pg':
            return this.heal(f.target.split('->')[0], 'pg');
          case 'partition-redis':
            for (const m of f.params.masters as string[]) this.heal(f.target.split('->')[0], m);
            return;
          case 'slow-link':
            return this.slow(f.target.split('->')[0], String(f.params.server), 0);
          case 'clock':
            return this.service(f.target).setClock(0);
          case 'redis-pause':
            return this.redisServer(f.target).resume();
          default:
            return;
        }
      },
      healthy: (deadline) => allHealthy(this.nodes(), deadline),
    };
  }

  async stop(): Promise<void> {
    await Promise.all(this.services.map((s) => s.stop().catch(() => undefined)));
    for (const l of this.links.values()) await l.close().catch(() => undefined);
    await Promise.all(this.redis.map((r) => r.stop().catch(() => undefined)));
    await this.pg?.destroy().catch(() => undefined);
    this.network?.cleanup();
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
