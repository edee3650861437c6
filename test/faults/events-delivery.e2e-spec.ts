// Faults of the event stream's delivery: webhook receivers that fail, time out and answer slowly; the
// delivering process SIGKILLed mid-delivery (the other process takes over when its lease lapses);
// a batch that never gets through set aside as a dead letter; PostgreSQL crashed mid-sale. Each time
// the events the receiver acknowledged, read back as a shop would, are exactly the events committed
// (none lost, none of a change that did not commit) and reproduce the orders and the stock.
import { join } from 'node:path';
import { Client } from 'pg';
import { resetState } from '../support/database';
import {
  cursorsAscending,
  distinct,
  expectReplayMatches,
  startReceiver,
  StreamEvent,
  WebhookReceiver,
} from '../support/events';
import {
  createProduct,
  pooled,
  request,
  ServiceProcess,
  shop,
  startedTogether,
  startService,
  testUrls,
} from '../support/service';
import {
  crashPostgres,
  FaultPostgres,
  FaultRedis,
  loadUntilStopped,
  metric,
  scratchDir,
  startFaultService,
  stopAll,
  withPg,
} from './support';
import { sleep, waitFor } from '../support/wait';

const SECRET = 'webhook-secret-for-the-specs-0123456789';
const TIMEOUT_MS = 400;
const webhookEnv = (receiver: WebhookReceiver, more: Record<string, string> = {}) => ({
  WEBHOOK_URL: receiver.url,
  WEBHOOK_SECRET: SECRET,
  WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
  WEBHOOK_BACKOFF_MS: '20',
  WEBHOOK_BATCH: '25',
  EVENTS_POLL_MS: '50',
  EXPIRY_SWEEP_MS: '50',
  ...more,
});

/** What the receiver got so far, for failure messages. */
const state = (r: WebhookReceiver) =>
  `${r.deliveries.length} deliveries (${r.deliveries.map((d) => (typeof d.answer === 'string' ? d.answer : 'slow')).join(' ')}), ${distinct(r.acknowledged()).length} distinct events acknowledged`;

/** Every event in PostgreSQL, in stream order, as readers see them. */
async function committedEvents(db: Client): Promise<string[]> {
  const { rows } = await db.query<{ cursor: string }>(
    `SELECT tx::text || '-' || id::text AS cursor FROM order_events ORDER BY tx, id`,
  );
  return rows.map((r) => r.cursor);
}

/** Sells to `buyers` users over both processes, then pays a third and cancels a third (the rest expire). */
async function sale(urls: string[], productId: number, buyers: number, prefix: string): Promise<void> {
  const sold = (
    await pooled(
      Array.from({ length: buyers }, (_, i) => async () => {
        const userId = `${prefix}-${i}`;
        const r = await request(urls[i % urls.length], 'POST', '/orders', { userId, productId });
        return r.status === 201 ? { id: r.body.id as number, userId } : null;
      }),
      32,
    )
  ).filter((o): o is { id: number; userId: string } => o !== null);
  await pooled(
    sold.map((o, i) => async () => {
      const url = urls[(i + 1) % urls.length];
      if (i % 3 === 0) await request(url, 'POST', `/orders/${o.id}/pay`, { userId: o.userId }, shop);
      if (i % 3 === 1) await request(url, 'POST', `/orders/${o.id}/cancel`, { userId: o.userId }, shop);
    }),
    32,
  );
}

describe('webhook delivery through failing receivers and a killed process', () => {
  let receiver: WebhookReceiver;
  let a: ServiceProcess | undefined;
  let b: ServiceProcess | undefined;
  let db: Client;

  beforeAll(async () => {
    await resetState();
    receiver = await startReceiver(SECRET);
    db = new Client({ connectionString: testUrls().databaseUrl });
    await db.connect();
  });
  afterAll(async () => {
    await stopAll(
      async () => a?.stop(),
      async () => b?.stop(),
      () => receiver?.close(),
      () => db?.end(),
    );
  });

  it('delivers every committed event, signed and in order, through failures, a timeout, slow answers and a SIGKILL of the delivering process', async () => {
    // Fails twice, hangs past the timeout, fails again; then slow answers, so that delivery is
    // still under way when the delivering process is killed.
    receiver.script(['fail', 'fail', 'hang', 'fail'], { slowMs: 60 });
    [a, b] = await startedTogether([startService(webhookEnv(receiver)), startService(webhookEnv(receiver))]);
    const p = await createProduct(a.url, { stock: 150, segments: 3, paymentTimeoutS: 1 });
    await sale([a.url, b.url], p.id, 260, 'hook');

    // Kill the holder of the lease once a few batches went through.
    await waitFor('a few acknowledged deliveries', () => receiver.acknowledged().length >= 50, 30_000);
    const [{ lease_owner: owner }] = (
      await db.query<{ lease_owner: string }>(`SELECT lease_owner FROM event_marks WHERE name = 'webhook'`)
    ).rows;
    const victim = [a, b].find((s) => owner.split(':')[1] === String(s?.pid)) as ServiceProcess;
    expect(victim).toBeDefined();
    victim.child.kill('SIGKILL');
    const survivor = victim === a ? b : a;
    if (victim === a) a = undefined;
    else b = undefined;

    // Done once every reservation left unpaid has expired (no event can follow) and every event
    // committed has been acknowledged.
    await waitFor(
      'the survivor to take over and deliver the rest',
      async () => {
        const reserved = await db.query(`SELECT 1 FROM orders WHERE product_id = $1 AND status = 'reserved'`, [p.id]);
        const all = await committedEvents(db);
        return reserved.rowCount === 0 && all.length > 0 && distinct(receiver.acknowledged()).length === all.length;
      },
      60_000,
    );
    const acknowledged = distinct(receiver.acknowledged());
    expect(acknowledged.map((e) => e.cursor)).toEqual(await committedEvents(db));
    expect(cursorsAscending(acknowledged)).toBe(true);
    expect(receiver.deliveries.every((d) => d.signed)).toBe(true);
    expect(receiver.deliveries.map((d) => d.answer).slice(0, 4)).toEqual(['fail', 'fail', 'hang', 'fail']);
    await expectReplayMatches(db, p.id, acknowledged);
    // The survivor counted what it delivered; nothing was dead-lettered.
    expect(await metric(survivor.url, 'flashsale_webhook_events_delivered_total')).toBeGreaterThan(0);
    expect(await metric(survivor.url, 'flashsale_webhook_dead_letters_total')).toBe(0);
    expect((await db.query('SELECT 1 FROM webhook_dead_letters')).rowCount).toBe(0);
  });

  it('sets a batch aside as a dead letter after WEBHOOK_MAX_ATTEMPTS failures, counts it, and delivers on past it', async () => {
    await stopAll(
      async () => a?.stop(),
      async () => b?.stop(),
    );
    await resetState();
    receiver.deliveries.length = 0;
    receiver.script(['fail', 'fail', 'fail'], 'ok');
    a = await startService(webhookEnv(receiver, { WEBHOOK_MAX_ATTEMPTS: '3', WEBHOOK_BATCH: '1' }));
    const p = await createProduct(a.url, { stock: 10, segments: 1 });
    await sale([a.url], p.id, 4, 'dead');
    let committed: string[] = [];
    await waitFor(
      () =>
        `the rest delivered past the dead letter: ${state(receiver)} of ${committed.length} committed\n` +
        `committed:    ${committed.join(' ')}\nacknowledged: ${distinct(receiver.acknowledged())
          .map((e) => e.cursor)
          .join(' ')}\n${a?.output().slice(-3000)}`,
      async () => {
        committed = await committedEvents(db);
        return distinct(receiver.acknowledged()).length + 1 === committed.length;
      },
      30_000,
    );
    const [dead] = (
      await db.query<{ events: StreamEvent[]; attempts: number; last_error: string }>(
        'SELECT events, attempts, last_error FROM webhook_dead_letters',
      )
    ).rows;
    expect({ types: dead.events.map((e) => e.type), attempts: dead.attempts, error: dead.last_error }).toEqual({
      types: ['product.created'],
      attempts: 3,
      error: 'HTTP 500',
    });
    expect([...dead.events, ...distinct(receiver.acknowledged())].map((e) => e.cursor)).toEqual(
      await committedEvents(db),
    );
    expect(await metric(a.url, 'flashsale_webhook_dead_letters_total')).toBe(1);
    expect(await metric(a.url, 'flashsale_webhook_deliveries_total')).toBe(receiver.deliveries.length);
  });
});

describe('the event stream when PostgreSQL crashes mid-sale', () => {
  const scratch = scratchDir('events-pg');
  let pg: FaultPostgres;
  let redis: FaultRedis;
  let receiver: WebhookReceiver;
  let a: ServiceProcess;
  let b: ServiceProcess;

  beforeAll(async () => {
    [pg, redis, receiver] = await Promise.all([
      FaultPostgres.start(join(scratch.dir, 'pg')),
      FaultRedis.start(),
      startReceiver(SECRET),
    ]);
    const env = webhookEnv(receiver, { DB_TIMEOUT_MS: '800', LOG_LEVEL: 'error', WEBHOOK_BATCH: '100' });
    [a, b] = await startedTogether([startFaultService(pg, redis, env), startFaultService(pg, redis, env)]);
  });
  afterAll(async () => {
    await stopAll(
      () => a?.stop(),
      () => b?.stop(),
      () => receiver?.close(),
      () => redis?.stop(),
      () => pg?.stop(),
    );
    scratch.cleanup();
  });

  it('loses no event and delivers none of a change that did not commit', async () => {
    const product = await createProduct(a.url, { stock: 100_000, segments: 8 });
    const load = loadUntilStopped({
      concurrency: 16,
      productId: product.id,
      prefix: 'crash',
      pick: (i) => (i % 2 === 0 ? a.url : b.url),
      pauseMs: 2,
    });
    await waitFor('orders before the crash', () => load.outcomes.filter((o) => o.status === 201).length >= 100);
    await crashPostgres(pg);
    await sleep(500); // half a second down
    await pg.start();
    await waitFor(
      'orders after the restart',
      () => load.outcomes.filter((o) => o.status === 201).length >= 300,
      30_000,
    );
    await load.stop();
    await withPg(pg.url, async (db) => {
      await waitFor(
        'every committed event delivered',
        async () => distinct(receiver.acknowledged()).length === (await committedEvents(db)).length,
        30_000,
      );
      const acknowledged = distinct(receiver.acknowledged());
      expect(acknowledged.map((e) => e.cursor)).toEqual(await committedEvents(db));
      // Every order in PostgreSQL has its event, and every event its committed order.
      await expectReplayMatches(db, product.id, acknowledged);
      // Replies lost with the crash may have committed; the events say what did.
      const told = new Set(load.outcomes.filter((o) => o.status === 201).map((o) => o.userId));
      const orders = new Set(acknowledged.filter((e) => e.type === 'order.reserved').map((e) => e.data.userId));
      expect([...told].filter((u) => !orders.has(u))).toEqual([]);
    });
  });
});
