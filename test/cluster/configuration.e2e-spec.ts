// REDIS_CLUSTER_NODES replaces REDIS_URL and REDIS_LOCK_URLS: alone it starts a service that sells
// through the cluster; beside either of the others the start is refused, with a message that names
// both variables and an exit code other than 0.
import { EmbeddedRedisCluster, startEmbeddedRedisCluster } from '../../harness/embedded-redis-cluster';
import { placeOrder } from '../faults/support';
import { createProduct, request, startClusterService, startService, testUrls } from '../support/service';

describe('configuration of a service on a Redis Cluster', () => {
  let cluster: EmbeddedRedisCluster;

  beforeAll(async () => {
    cluster = await startEmbeddedRedisCluster();
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('should start with REDIS_CLUSTER_NODES alone (one node is enough to find the others), sell through the cluster and stop with exit code 0', async () => {
    const service = await startClusterService(cluster.urls.slice(0, 1));
    try {
      expect((await request(service.url, 'GET', '/health')).status).toBe(200);
      const product = await createProduct(service.url, { stock: 10, segments: 5 });
      expect((await placeOrder(service.url, 'cluster-config-buyer', product.id)).status).toBe(201);
    } finally {
      expect(await service.stop()).toBe(0);
    }
  });

  it.each([
    ['REDIS_URL', () => startService({ REDIS_CLUSTER_NODES: cluster.urls.join(',') })],
    ['REDIS_LOCK_URLS', () => startClusterService(cluster.urls, { REDIS_LOCK_URLS: testUrls().redisUrl })],
  ])(
    'should refuse to start when REDIS_CLUSTER_NODES and %s are both set, naming both, with a non-zero exit code',
    async (other, start) => {
      const failure = await start().then(
        async (service) => {
          await service.stop();
          return 'it started';
        },
        (err: Error) => err.message,
      );
      // The launcher's message: "service exited (<code>) before serving:" and the service's output.
      const code = /^service exited \((\w+)\) before serving/.exec(failure)?.[1];
      expect({ code, failure }).toEqual({ code: expect.stringMatching(/^[1-9]\d*$/), failure });
      const line = failure.split('\n').find((l) => l.includes('REDIS_CLUSTER_NODES') && l.includes(other));
      expect(line).toBeDefined();
    },
  );
});
