// Fault: a storm of joins into one product over two service processes, with one process killed
// (SIGKILL) mid-bucket and started again, a Redis FLUSHALL, and a PostgreSQL crash (an immediate
// shutdown, as `pg_ctl -m immediate`) and restart, all while the joins go on. What
// docs/waiting-room.md promises: a join answered is committed, so every answered join has exactly
// one place, the same on both processes and in PostgreSQL; the places run 1..n with no hole and none
// twice; the order is the one `npm run verify-queue` recomputes from the published records; and a
// join answered before another was sent is never placed behind it unless both fell in one bucket.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { admin, pooled, request, ServiceProcess } from '../support/service';
import { bucketOfPosition, promiseBreaches } from '../../harness/queue-order';
import { crashPostgres, FaultPostgres, FaultRedis, scratchDir, startFaultService, stopAll, withPg } from './support';
import { waitFor } from '../support/wait';

const PRE_QUEUE = 150;
const CONCURRENCY = 16;
const env = { ADMISSION_TICK_MS: '50', QUEUE_BUCKET_MS: '100', LOG_LEVEL: 'error' };
const ROOT = join(__dirname, '..', '..');

interface Join {
  userId: string;
  sentAt: number;
  answeredAt: number;
  status: number;
  ticket?: string;
  lotteryId?: string;
}

describe('a join storm into one product through a SIGKILL, a Redis FLUSHALL and a PostgreSQL crash', () => {
  const scratch = scratchDir('queue-storm');
  let pg: FaultPostgres;
  let redis: FaultRedis;
  let a: ServiceProcess;
  let b: ServiceProcess;

  beforeAll(async () => {
    [pg, redis] = await Promise.all([FaultPostgres.start(join(scratch.dir, 'pg')), FaultRedis.start()]);
    [a, b] = await Promise.all([startFaultService(pg, redis, env), startFaultService(pg, redis, env)]);
  });
  afterAll(async () => {
    await stopAll(
      () => a?.stop(),
      () => b?.stop(),
      () => redis?.stop(),
      () => pg?.stop(),
    );
    scratch.cleanup();
  });

  it('places every answered join exactly once, 1..n, in the order the verifier recomputes and the bucket promise allows', async () => {
    const created = await request(
      a.url,
      'POST',
      '/admin/products',
      {
        name: 'storm',
        stock: 20,
        segments: 2,
        waitingRoom: true,
        startsAt: new Date(Date.now() + 3_600_000).toISOString(),
      },
      admin,
    );
    expect(created.status).toBe(201);
    const productId: number = created.body.id;
    const joins: Join[] = [];
    let next = 0;
    const joinOn = async (url: string, userId: string): Promise<Join> => {
      const sentAt = Date.now();
      const r = await request(url, 'POST', `/products/${productId}/queue`, { userId }).catch(() => null);
      const done: Join = { userId, sentAt, answeredAt: Date.now(), status: r?.status ?? 0 };
      if (r !== null && (r.status === 201 || r.status === 200)) {
        done.ticket = r.body.id;
        done.lotteryId = r.body.lotteryId;
      }
      joins.push(done);
      return done;
    };
    // The pre-queue, then the start.
    await pooled(
      Array.from({ length: PRE_QUEUE }, (_, i) => () => joinOn(i % 2 ? b.url : a.url, `s-${next++}`)),
      CONCURRENCY,
    );
    const opened = await request(
      a.url,
      'PATCH',
      `/admin/products/${productId}`,
      { startsAt: new Date().toISOString() },
      admin,
    );
    expect(opened.status).toBe(200);

    // The storm: joins of new users over the live processes, every tenth a user joining again.
    const live = new Set([a.url, b.url]);
    let stopped = false;
    const answered = () => joins.filter((j) => j.ticket !== undefined).length;
    const storm = Promise.all(
      Array.from({ length: CONCURRENCY }, async (_, worker) => {
        for (let n = 0; !stopped; n++) {
          const urls = [...live];
          const url = urls[(worker + n) % urls.length];
          const done = n % 10 === 9 ? joins.filter((j) => j.ticket !== undefined) : [];
          const again = done.length > 0 ? done[(worker * 31 + n) % done.length] : undefined;
          await joinOn(url, again?.userId ?? `s-${next++}`);
        }
      }),
    );
    try {
      await waitFor('answered joins before the kill', () => answered() > PRE_QUEUE + 300, 120_000);
      live.delete(a.url);
      await a.stop('SIGKILL');
      a = await startFaultService(pg, redis, env);
      live.add(a.url);
      await waitFor('answered joins before the flush', () => answered() > PRE_QUEUE + 600, 120_000);
      await redis.with((r) => r.flushall());
      await waitFor('answered joins before the crash', () => answered() > PRE_QUEUE + 900, 120_000);
      await crashPostgres(pg);
      const crashedAt = Date.now();
      await pg.start();
      await waitFor(
        'joins answered after the restart',
        () => joins.filter((j) => j.ticket !== undefined && j.sentAt > crashedAt).length > 200,
        120_000,
      );
    } finally {
      stopped = true;
      await storm;
    }
    const faults = joins.filter((j) => j.ticket === undefined);
    expect(faults.length).toBeGreaterThan(0); // the faults did meet joins in flight

    // Every ticket in PostgreSQL placed (the admitters seal what is left), then what each process says.
    const places = await waitFor(
      'every ticket placed',
      () =>
        withPg(pg.url, async (db) => {
          const tickets = (
            await db.query('SELECT count(*)::int AS n FROM queue_tickets WHERE product_id = $1', [productId])
          ).rows[0].n as number;
          const rows = (
            await db.query('SELECT user_id, ticket_id, position::int FROM queue_places($1) ORDER BY position', [
              productId,
            ])
          ).rows as Array<{ user_id: string; ticket_id: string; position: number }>;
          return rows.length === tickets ? rows : null;
        }),
      60_000,
    );
    expect(places.map((p) => p.position)).toEqual(Array.from({ length: places.length }, (_, i) => i + 1));
    const inPostgres = new Map(places.map((p) => [p.user_id, p.position]));
    const firstAnswer = new Map<string, Join>();
    for (const j of joins) if (j.ticket !== undefined && !firstAnswer.has(j.userId)) firstAnswer.set(j.userId, j);
    const told = await pooled(
      [...firstAnswer.values()].map((j, i) => async () => {
        const r = await request(i % 2 ? a.url : b.url, 'GET', `/products/${productId}/queue/${j.ticket}`);
        return {
          userId: j.userId,
          lotteryId: j.lotteryId as string,
          status: r.status,
          position: r.body.position as number,
        };
      }),
      32,
    );
    // No answered join missing, and each has the one place PostgreSQL gives it.
    expect(told.filter((t) => t.status !== 200 || t.position !== inPostgres.get(t.userId))).toEqual([]);
    // A user's every answer names one ticket.
    for (const j of joins.filter((x) => x.ticket !== undefined))
      expect({ user: j.userId, lotteryId: j.lotteryId }).toEqual({
        user: j.userId,
        lotteryId: firstAnswer.get(j.userId)?.lotteryId,
      });

    // The verifier, as a buyer runs it, against the records: every draw checks, and its places are the ones told.
    const run = await promisify(execFile)(
      process.execPath,
      ['dist/src/cli/verify-queue.js', b.url, String(productId), '--json'],
      {
        cwd: ROOT,
        maxBuffer: 64 * 1024 * 1024,
      },
    ).catch((err: { code: number; stdout: string }) => err);
    const verdict = JSON.parse(run.stdout);
    expect(verdict.problems).toEqual([]);
    expect(verdict.tickets).toBe(places.length);
    for (const t of told)
      expect({ lotteryId: t.lotteryId, position: verdict.positions[t.lotteryId] }).toEqual({
        lotteryId: t.lotteryId,
        position: t.position,
      });

    // The promise, over the joins made after the start (a pre-queue ticket's place is its draw's).
    const bucketOf = bucketOfPosition((await request(b.url, 'GET', `/products/${productId}/queue/draws`)).body.draws);
    const arrivals = [...firstAnswer.values()]
      .filter((j) => Number(j.userId.slice(2)) >= PRE_QUEUE)
      .map((j) => ({ sentAt: j.sentAt, answeredAt: j.answeredAt, position: inPostgres.get(j.userId) as number }));
    expect(promiseBreaches(arrivals, bucketOf)).toEqual([]);
  }, 300_000);
});
