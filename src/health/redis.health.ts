// Terminus indicator for Redis, each server pinged once and reported one by one.
// Standalone: the hint client and every Redlock master (lockMasters[i] is REDIS_LOCK_URLS[i]);
// ready while a quorum of lock masters answers: that is what orders need, the hint client only
// saves work (orders run without hints).
// Redis Cluster: every master the cluster knows (from CLUSTER NODES, so a dead one is listed too);
// ready while at least one answers: segments on the others keep selling, those on a dead one are
// passed over.
import { Inject, Injectable } from '@nestjs/common';
import { HealthIndicatorService } from '@nestjs/terminus';
import { Cluster } from 'ioredis';
import { REDIS_CLIENT, REDIS_LOCK_CLIENTS, RedisClient } from '../infrastructure/redis.providers';
import { clusterMasters } from './cluster-nodes';
import { MetricsService } from '../metrics/metrics.service';

type Status = 'up' | 'down';

const ping = (c: RedisClient): Promise<Status> =>
  c.ping().then(
    () => 'up' as const,
    () => 'down' as const,
  );

@Injectable()
export class RedisHealthIndicator {
  constructor(
    private readonly indicators: HealthIndicatorService,
    @Inject(REDIS_CLIENT) private readonly main: RedisClient,
    @Inject(REDIS_LOCK_CLIENTS) private readonly lockClients: RedisClient[],
    private readonly metrics: MetricsService,
  ) {}

  async check(key: string) {
    const session = this.indicators.check(key);
    const { healthy, details }: { healthy: boolean; details: Record<string, unknown> } =
      this.main instanceof Cluster ? await this.cluster(this.main) : await this.standalone();
    return healthy ? session.up(details) : session.down(details);
  }

  private async standalone() {
    // A client shared by hints and a lock master (the usual single Redis) is pinged once.
    const clients = [...new Set([this.main, ...this.lockClients])];
    const pinged = new Map<RedisClient, Status>(
      await Promise.all(clients.map(async (c): Promise<[RedisClient, Status]> => [c, await ping(c)])),
    );
    const lockMasters = this.lockClients.map((c) => pinged.get(c) as Status);
    lockMasters.forEach((s, i) => this.metrics.redisMasterUp.set({ master: `lock master ${i}` }, s === 'up' ? 1 : 0));
    const up = lockMasters.filter((s) => s === 'up').length;
    const quorum = Math.floor(lockMasters.length / 2) + 1;
    return {
      healthy: up >= quorum,
      details: {
        hints: pinged.get(this.main) as Status,
        lockMasters,
        lockQuorum: `${up} of ${lockMasters.length} up, ${quorum} needed`,
      },
    };
  }

  private async cluster(cluster: Cluster) {
    const listed = await cluster.cluster('NODES').then(
      (reply) => clusterMasters(String(reply)),
      () => [] as string[],
    );
    const connected = new Map(cluster.nodes('master').map((n) => [`${n.options.host}:${n.options.port}`, n]));
    const names = [...new Set([...listed, ...connected.keys()])].sort();
    const masters: Record<string, Status> = {};
    for (const [name, status] of await Promise.all(
      names.map(async (name): Promise<[string, Status]> => {
        const node = connected.get(name);
        return [name, node ? await ping(node) : 'down'];
      }),
    )) {
      masters[name] = status;
      this.metrics.redisMasterUp.set({ master: name }, status === 'up' ? 1 : 0);
    }
    const up = Object.values(masters).filter((s) => s === 'up').length;
    return {
      healthy: up > 0,
      details: { cluster: { state: cluster.status, masters, up: `${up} of ${names.length} masters up` } },
    };
  }
}
