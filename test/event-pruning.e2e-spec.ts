// The event stream's retention against the real PostgreSQL: the pruner deletes events older than
// EVENTS_RETENTION_S and no newer ones, never one the webhook has not delivered yet, moves the
// pruned mark (which GET /events answers 410 behind), counts what it deleted, and lets one process
// prune at a time.
import { DataSource } from 'typeorm';
import { EventsConfig } from '../src/config/app-config';
import { EventPruner } from '../src/events/event-pruner';
import { EventsRepository } from '../src/events/events.repository';
import { dataSourceOptions } from '../src/infrastructure/data-source';
import { MetricsService } from '../src/metrics/metrics.service';
import { resetState, withDb } from './support/database';
import { testUrls } from './support/service';

const HOUR = 3600;

describe('pruning the event stream', () => {
  let db: DataSource;
  let repo: EventsRepository;
  let metrics: MetricsService;

  beforeAll(async () => {
    db = await new DataSource(dataSourceOptions(testUrls().databaseUrl, { poolSize: 4 })).initialize();
    repo = new EventsRepository(db);
  });
  afterAll(() => db?.destroy());
  beforeEach(async () => {
    await resetState();
    metrics = new MetricsService();
  });

  /** `old` events two hours old, then `fresh` ones of now, each in a transaction of its own; their cursors in stream order. */
  async function events(old: number, fresh: number): Promise<string[]> {
    return withDb(async (c) => {
      for (let i = 0; i < old + fresh; i++)
        await c.query(
          `INSERT INTO order_events (product_id, type, data, at) VALUES (1, 'product.restocked', '{}', now() - make_interval(secs => $1))`,
          [i < old ? 2 * HOUR : 0],
        );
      const { rows } = await c.query<{ cursor: string }>(
        `SELECT tx::text || '-' || id::text AS cursor FROM order_events ORDER BY tx, id`,
      );
      return rows.map((r) => r.cursor);
    });
  }
  const left = () =>
    withDb(async (c) =>
      (
        await c.query<{ cursor: string }>(
          `SELECT tx::text || '-' || id::text AS cursor FROM order_events ORDER BY tx, id`,
        )
      ).rows.map((r) => r.cursor),
    );
  const pruner = (config: Partial<EventsConfig>) =>
    new EventPruner({ ...new EventsConfig(), retentionS: HOUR, ...config }, repo, metrics);
  const pruned = async () => (await metrics.eventsPruned.get()).values[0]?.value ?? 0;

  it('deletes the events older than the retention, keeps the rest, moves the pruned mark and counts', async () => {
    const cursors = await events(5, 3);
    expect(await pruner({}).prune()).toBe(5);
    expect(await left()).toEqual(cursors.slice(5));
    const mark = await repo.prunedThrough();
    expect(`${mark.tx}-${mark.id}`).toBe(cursors[4]);
    expect(await pruned()).toBe(5);
    // Nothing more is due.
    expect(await pruner({}).prune()).toBe(0);
  });

  it('keeps every event the webhook has not delivered, however old', async () => {
    const cursors = await events(6, 2);
    const [tx, id] = cursors[2].split('-');
    await withDb((c) =>
      c.query(`INSERT INTO event_marks (name, tx, id) VALUES ('webhook', $1::xid8, $2::bigint)`, [tx, id]),
    );
    const withWebhook = pruner({ webhookUrl: 'http://127.0.0.1:9/hook', webhookSecret: 's'.repeat(32) });
    expect(await withWebhook.prune()).toBe(3);
    expect(await left()).toEqual(cursors.slice(3));
  });

  it('prunes in one process at a time: a second pruner skips while the first holds the lock', async () => {
    await events(4, 0);
    await withDb(async (c) => {
      await c.query('BEGIN');
      await c.query('SELECT pg_advisory_xact_lock(1886549358, 0)');
      expect(await pruner({}).prune()).toBe(0);
      await c.query('ROLLBACK');
    });
    expect(await pruner({}).prune()).toBe(4);
  });
});
