// The monitoring of docs/monitoring against a real Prometheus scraping two service processes during
// a sale: every dashboard query returns data (or is one that only has data when something fails,
// named below), `promtool check rules` passes, and three alerts fire when their fault is made: the
// expiry sweep held (EXPIRY_SWEEP_MS=0 on both processes), a webhook receiver that refuses every
// delivery (dead letters), and the Redis both processes use stopped.
// The rules are loaded with every `for:` set to 0s, so that an alert fires within a few evaluations
// rather than after minutes; the expressions are the published ones.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { FaultRedis, stopAll } from './faults/support';
import { waitFor } from './support/wait';
import { resetState } from './support/database';
import { startReceiver, WebhookReceiver } from './support/events';
import { prometheusBinary, RunningPrometheus, startPrometheus } from './support/prometheus';
import { admin, pooled, request, ServiceProcess, shop, startedTogether, startService } from './support/service';

const MONITORING = join(__dirname, '..', 'docs', 'monitoring');
/** Panels whose queries have data only when something fails or is refused (their description says so). */
const WEBHOOK_SECRET = 'webhook-secret-for-the-specs-0123456789';
const DATA_WHEN_FAILING = new Set([
  '429 RATE_LIMITED per second',
  'Server errors per second (503 / 500)',
  'Waiting room: ETA error p90',
  'Dependency errors per second',
]);

interface Panel {
  title: string;
  targets: Array<{ expr: string }>;
}

describe('dashboards and alert rules against a real Prometheus scraping two service processes', () => {
  let redis: FaultRedis;
  let a: ServiceProcess;
  let b: ServiceProcess;
  let prometheus: RunningPrometheus;
  let receiver: WebhookReceiver;

  beforeAll(async () => {
    await resetState();
    redis = await FaultRedis.start();
    // A webhook receiver that refuses everything: every batch becomes a dead letter at its first failure.
    receiver = await startReceiver(WEBHOOK_SECRET);
    receiver.script([], 'fail');
    const env = {
      REDIS_URL: redis.url,
      EXPIRY_SWEEP_MS: '0',
      ADMISSION_TICK_MS: '100',
      LOG_LEVEL: 'error',
      WEBHOOK_URL: receiver.url,
      WEBHOOK_SECRET,
      WEBHOOK_MAX_ATTEMPTS: '1',
      EVENTS_POLL_MS: '100',
    };
    [a, b] = await startedTogether([startService(env), startService(env)]);
    const rules = readFileSync(join(MONITORING, 'alerts.yml'), 'utf8').replace(/for: \S+/g, 'for: 0s');
    prometheus = await startPrometheus([new URL(a.url).host, new URL(b.url).host], rules);
  });
  afterAll(async () => {
    await stopAll(
      () => prometheus?.stop(),
      () => a?.stop(),
      () => b?.stop(),
      () => redis?.stop(),
      () => receiver?.close(),
    );
  });

  it('answers every dashboard query with data after a sale, and promtool accepts the rules', async () => {
    const urls = [a.url, b.url];
    for (const url of urls) await request(url, 'GET', '/health');
    const created = await request(a.url, 'POST', '/admin/products', { name: 'watched', stock: 40, segments: 4 }, admin);
    const productId = created.body.id as number;
    const replies = await pooled(
      Array.from(
        { length: 160 },
        (_, i) => () => request(urls[i % 2], 'POST', '/orders', { userId: `watcher-${i}`, productId }),
      ),
      16,
    );
    const orders = replies.filter((r) => r.status === 201).map((r) => r.body as { id: number; userId: string });
    expect(orders).toHaveLength(40);
    for (const o of orders.slice(0, 20))
      await request(b.url, 'POST', `/orders/${o.id}/pay`, { userId: o.userId }, shop);
    for (const o of orders.slice(20, 25))
      await request(a.url, 'POST', `/orders/${o.id}/cancel`, { userId: o.userId }, shop);
    const room = await request(
      a.url,
      'POST',
      '/admin/products',
      { name: 'queued', stock: 5, segments: 1, waitingRoom: true },
      admin,
    );
    for (let i = 0; i < 20; i++) {
      const t = await request(urls[i % 2], 'POST', `/products/${room.body.id}/queue`, { userId: `q-${i}` });
      await request(urls[(i + 1) % 2], 'GET', `/products/${room.body.id}/queue/${t.body.id}`);
    }
    // A shop reads the event stream.
    expect((await request(b.url, 'GET', '/events?limit=10', undefined, shop)).status).toBe(200);
    const dashboard = JSON.parse(readFileSync(join(MONITORING, 'dashboard.json'), 'utf8')) as { panels: Panel[] };
    const emptyPanels = async () => {
      const empty: string[] = [];
      for (const panel of dashboard.panels)
        for (const target of panel.targets) {
          const result = await prometheus.query(target.expr.replaceAll('$__rate_interval', '30s'));
          if (result.length === 0 && !DATA_WHEN_FAILING.has(panel.title)) empty.push(`${panel.title}: ${target.expr}`);
        }
      return empty;
    };
    // Once Prometheus has scraped the sale (a few scrapes; later on a loaded machine), every panel has data.
    let empty: string[] = [];
    await waitFor(
      () => `every panel to have data; still empty: ${empty.join(', ')}`,
      async () => (empty = await emptyPanels()).length === 0,
      60_000,
      1000,
    ).catch(() => undefined);
    expect(empty).toEqual([]);
    // Both processes are scraped.
    expect((await prometheus.query('up{job="flashsale"} == 1')).length).toBe(2);

    const { stdout } = await promisify(execFile)(prometheusBinary('promtool'), [
      'check',
      'rules',
      join(MONITORING, 'alerts.yml'),
    ]);
    expect(stdout).toMatch(/SUCCESS: 9 rules found/);
  }, 120_000);

  it('fires the sweep alert while no process sweeps, the dead-letter alert while the webhook fails, and the Redis alert once Redis stops', async () => {
    const firing = async (name: string) =>
      (await prometheus.alerts()).some((x) => x.labels.alertname === name && x.state === 'firing');
    await waitFor('FlashSaleExpirySweepStopped firing', () => firing('FlashSaleExpirySweepStopped'), 20_000, 500);
    await waitFor('FlashSaleWebhookDeadLetters firing', () => firing('FlashSaleWebhookDeadLetters'), 20_000, 500);
    expect(await firing('FlashSaleRedisMasterDown')).toBe(false);
    await redis.stop();
    // The gauge follows GET /health, as a load balancer's probes call it.
    const probing = setInterval(() => {
      for (const s of [a, b]) void request(s.url, 'GET', '/health').catch(() => undefined);
    }, 500);
    try {
      await waitFor('FlashSaleRedisMasterDown firing', () => firing('FlashSaleRedisMasterDown'), 30_000, 500);
    } finally {
      clearInterval(probing);
    }
  }, 90_000);
});
