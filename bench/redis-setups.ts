// The Redis servers behind each Redis setup (REDIS_SETUPS in bench/types.ts): single is the run's
// redis-server; quorum adds two independent ones (a Redlock majority of 2 of 3); cluster is a
// 3-master Redis Cluster. The extra servers run from the first service start on their setup to the
// last, each setup with a cost probe summed over all of its servers.
import { Client } from 'pg';
import { startEmbeddedRedis } from '../src/infrastructure/embedded-redis';
import { startEmbeddedRedisCluster } from '../harness/embedded-redis-cluster';
import { CostProbe } from './costs';
import { ServiceRedis } from './service';
import { RedisSetup } from './types';

export interface SetupServers {
  /** What the service is given (REDIS_URL [+ REDIS_LOCK_URLS] or REDIS_CLUSTER_NODES). */
  service: ServiceRedis;
  /** Reads the costs summed over every server the setup's orders touch. */
  costs: CostProbe;
}

type Held = SetupServers & { stop(): Promise<void> };

export class RedisSetups {
  private readonly held = new Map<RedisSetup, Held>();

  constructor(
    private readonly db: Client,
    /** The run's redis-server: the single setup, and the first quorum master and REDIS_URL of the quorum. */
    private readonly mainUrl: string,
    /** The run's probe of the main redis-server, which single uses as it is. */
    private readonly mainCosts: CostProbe,
    private readonly log: (line: string) => void,
  ) {}

  /** The setup's servers, started now if they are not running yet. */
  async servers(setup: RedisSetup): Promise<SetupServers> {
    if (setup === 'single') return { service: { url: this.mainUrl }, costs: this.mainCosts };
    const seen = this.held.get(setup);
    if (seen) return seen;
    const held = setup === 'quorum' ? await this.startQuorum() : await this.startCluster();
    this.held.set(setup, held);
    return held;
  }

  /** Stops the setup's extra servers (nothing for single). */
  async release(setup: RedisSetup): Promise<void> {
    const held = this.held.get(setup);
    if (!held) return;
    this.held.delete(setup);
    await held.stop();
  }

  async stop(): Promise<void> {
    for (const setup of [...this.held.keys()]) await this.release(setup);
  }

  private async startQuorum(): Promise<Held> {
    this.log('starting two more redis-servers for the Redlock quorum ...');
    const extra = await Promise.allSettled([startEmbeddedRedis(), startEmbeddedRedis()]);
    const started = extra.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const stopAll = async () => void (await Promise.all(started.map((r) => r.stop())));
    const failed = extra.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      await stopAll();
      throw failed.reason;
    }
    const urls = [this.mainUrl, ...started.map((r) => r.url)];
    return this.withProbe({ url: this.mainUrl, lockUrls: urls }, urls, stopAll);
  }

  private async startCluster(): Promise<Held> {
    this.log('starting a 3-master Redis Cluster ...');
    const cluster = await startEmbeddedRedisCluster({ masters: 3 });
    return this.withProbe({ clusterNodes: cluster.urls }, cluster.urls, () => cluster.stop());
  }

  /** `urls`: every server the setup's orders touch, in a fixed order (the per-server costs follow it). */
  private async withProbe(service: ServiceRedis, urls: string[], stopServers: () => Promise<void>): Promise<Held> {
    const costs = await CostProbe.open(this.db, urls).catch(async (err: unknown) => {
      await stopServers();
      throw err;
    });
    return {
      service,
      costs,
      stop: async () => {
        costs.close();
        await stopServers();
      },
    };
  }
}
