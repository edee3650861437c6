// The servers of the nemesis's world, each restartable on its own port: PostgreSQL (the embedded
// one the service itself can start, here with commit timestamps on for the checker), and Redis
// masters (redis-server from PATH, no persistence, so a restart comes back empty).
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Redis from 'ioredis';
import { Client } from 'pg';
import { EmbeddedPostgres, startEmbeddedPostgres } from '../src/infrastructure/embedded-postgres';
import { EmbeddedRedis, startEmbeddedRedis } from '../src/infrastructure/embedded-redis';

export const DATABASE = 'flashsale_nemesis';

/** Writes a server's pid where a check that nothing outlives the run looks (nemesis/test). */
function notePid(dir: string, name: string, pid: number | undefined): void {
  writeFileSync(join(dir, `${name}.pid`), String(pid ?? ''));
}

export class PostgresServer {
  private server?: EmbeddedPostgres;
  private constructor(
    private readonly dataDir: string,
    private readonly pidDir: string,
  ) {}

  static async start(dataDir: string, pidDir: string): Promise<PostgresServer> {
    const pg = new PostgresServer(dataDir, pidDir);
    await pg.boot();
    return pg;
  }

  get port(): number {
    return (this.server as EmbeddedPostgres).port;
  }

  get url(): string {
    return (this.server as EmbeddedPostgres).url;
  }

  get pid(): number | undefined {
    return this.server?.pid;
  }

  private async boot(port?: number): Promise<void> {
    this.server = await startEmbeddedPostgres({
      dataDir: this.dataDir,
      database: DATABASE,
      port,
      persistent: true,
      // The checker orders events by commit (pg_xact_commit_timestamp).
      settings: { track_commit_timestamp: 'on', max_connections: '400' },
    });
    notePid(this.pidDir, 'pg', this.server.pid);
  }

  /** `pg_ctl stop -m immediate`: SIGQUIT to the postmaster, no checkpoint; then started again on the same port. */
  async crash(downMs: number): Promise<void> {
    const { pid, port } = this.server as EmbeddedPostgres;
    process.kill(pid, 'SIGQUIT');
    while (alive(pid)) await sleep(20);
    await sleep(downMs);
    await this.boot(port);
  }

  async query<T>(sql: string, params: unknown[] = []): Promise<T[]> {
    const db = new Client({ connectionString: this.url });
    await db.connect();
    try {
      return (await db.query(sql, params)).rows as T[];
    } finally {
      await db.end();
    }
  }

  /** Stops it and removes its data. */
  async destroy(): Promise<void> {
    await this.server?.stop();
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

export class RedisServer {
  private server?: EmbeddedRedis;
  private constructor(
    readonly name: string,
    private readonly pidDir: string,
  ) {}

  static async start(name: string, pidDir: string): Promise<RedisServer> {
    const r = new RedisServer(name, pidDir);
    r.server = await startEmbeddedRedis();
    notePid(pidDir, name, r.pid);
    return r;
  }

  get port(): number {
    return (this.server as EmbeddedRedis).port;
  }

  get pid(): number | undefined {
    return this.server?.process.pid;
  }

  pause(): void {
    this.server?.process.kill('SIGSTOP');
  }

  resume(): void {
    this.server?.process.kill('SIGCONT');
  }

  /** SIGKILL, then a new empty redis-server on the same port after `downMs`. */
  async restartEmpty(downMs: number): Promise<void> {
    const old = this.server as EmbeddedRedis;
    old.process.kill('SIGCONT');
    old.process.kill('SIGKILL');
    await old.stop();
    await sleep(downMs);
    this.server = await startEmbeddedRedis({ port: old.port });
    notePid(this.pidDir, this.name, this.pid);
  }

  flush(): Promise<unknown> {
    return this.with((r) => r.flushall());
  }

  /**
   * What a jump of this server's clock by `ms` does to its keys (a forward jump expires every
   * key `ms` early, a backward one keeps them `ms` longer), done to the keys' TTLs: Debian's
   * redis-server (jemalloc) does not start under libfaketime.
   */
  jumpClock(ms: number): Promise<unknown> {
    return this.with((r) =>
      r.eval(
        `local n = 0
         local cursor = '0'
         repeat
           local page = redis.call('SCAN', cursor, 'COUNT', 1000)
           cursor = page[1]
           for _, key in ipairs(page[2]) do
             local left = redis.call('PTTL', key)
             if left > 0 then
               if left - tonumber(ARGV[1]) <= 0 then redis.call('DEL', key) else redis.call('PEXPIRE', key, left - tonumber(ARGV[1])) end
               n = n + 1
             end
           end
         until cursor == '0'
         return n`,
        0,
        ms,
      ),
    );
  }

  async with<T>(work: (r: Redis) => Promise<T>): Promise<T> {
    const client = new Redis({ port: this.port, host: '127.0.0.1', maxRetriesPerRequest: 1, lazyConnect: true });
    client.on('error', () => undefined);
    try {
      await client.connect();
      return await work(client);
    } finally {
      client.disconnect();
    }
  }

  async stop(): Promise<void> {
    this.server?.process.kill('SIGCONT');
    await this.server?.stop();
  }
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
