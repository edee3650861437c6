// The queue's SQL functions on a real PostgreSQL (migrations/1764500000000-QueueBuckets.ts and the
// later ones), called as the service calls them but with no service around: queue_join puts each
// ticket in the bucket of PostgreSQL's clock (the pre-queue before the start), queue_seal seals the
// buckets that have ended in time order (queue_seal_ended: in one statement, saying what it sealed), waits for the joins still writing to them and sends later ones to the next
// bucket, and draws each non-empty bucket with the next seed of a hash chain committed before;
// queue_places gives every sealed ticket its position, dense and as recomputed here from the
// published seeds. Then the migration itself, on rooms made before it, there and back. Runs on a
// database of its own in the test run's PostgreSQL.
import { createHash, createHmac, randomBytes } from 'node:crypto';
import { Client } from 'pg';
import { DataSource, EntityManager } from 'typeorm';
import { WaitingRoomRepository } from '../src/waiting-room/waiting-room.repository';
import { dataSourceOptions } from '../src/infrastructure/data-source';
import { runMigrations } from '../src/infrastructure/migrate';
import { QueueBuckets1764500000000 } from '../migrations/1764500000000-QueueBuckets';
import { withPg } from './faults/support';
import { waitFor } from './support/wait';
import { testUrls } from './support/service';
import { recomputeLottery, sha256Hex } from './support/waiting-room';

const DATABASE = 'flashsale_queue_sql_test';

function urlOf(database: string): string {
  const url = new URL(testUrls().databaseUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest();
const ticketOf = (productId: number, user: string) => sha256Hex(Buffer.from(`${productId}:${user}`)).slice(0, 24);

interface Draw {
  bucket: number;
  draw: number | null;
  first: number;
  tickets: number;
  seed: Buffer | null;
}

describe('the queue in SQL: buckets, seals, draws and places', () => {
  const url = urlOf(DATABASE);
  let db: Client;
  let product = 0;

  beforeAll(async () => {
    await withPg(testUrls().databaseUrl, async (c) => {
      await c.query(`DROP DATABASE IF EXISTS ${DATABASE} WITH (FORCE)`);
      await c.query(`CREATE DATABASE ${DATABASE}`);
    });
    await runMigrations(url);
    db = new Client({ connectionString: url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await withPg(testUrls().databaseUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${DATABASE} WITH (FORCE)`));
  });

  /** A product with a room of 20 ms buckets, starting `startsInMs` from PostgreSQL's now (null: no start). */
  async function room(startsInMs: number | null): Promise<{ id: number; seed: Buffer }> {
    const seed = randomBytes(32);
    const { rows } = await db.query(
      `INSERT INTO products (name, total_stock, segment_count, waiting_room, starts_at)
       VALUES ('q', 10, 1, true, CASE WHEN $1::int IS NULL THEN NULL ELSE clock_timestamp() + make_interval(secs => $1::int / 1000.0) END)
       RETURNING id`,
      [startsInMs],
    );
    const id = rows[0].id as number;
    await db.query(`INSERT INTO waiting_rooms (product_id, seed, seed_hash, bucket_ms) VALUES ($1, $2, $3, 20)`, [
      id,
      seed,
      sha256Hex(seed),
    ]);
    product = id;
    return { id, seed };
  }
  const join = async (users: string[], on: Client = db) =>
    (
      await on.query(`SELECT user_id, bucket::text, position, created FROM queue_join($1, $2, $3)`, [
        product,
        users,
        users.map((u) => ticketOf(product, u)),
      ])
    ).rows as Array<{ user_id: string; bucket: string; position: null; created: boolean }>;
  const seal = async () => {
    await db.query('BEGIN');
    try {
      const { rows } = await db.query('SELECT bucket::text, draw, first_position, tickets FROM queue_seal($1)', [
        product,
      ]);
      await db.query('COMMIT');
      return rows;
    } catch (err) {
      await db.query('ROLLBACK');
      throw err;
    }
  };
  const draws = async (): Promise<Draw[]> =>
    (
      await db.query(
        `SELECT bucket::text, draw, first_position::int AS first, tickets, seed FROM queue_draws WHERE product_id = $1 ORDER BY bucket`,
        [product],
      )
    ).rows.map((r) => ({ ...r, bucket: Number(r.bucket) }));
  const places = async () =>
    (
      await db.query(`SELECT user_id, ticket_id, bucket::text, position::int FROM queue_places($1) ORDER BY position`, [
        product,
      ])
    ).rows as Array<{ user_id: string; ticket_id: string; bucket: string; position: number }>;
  /** Whether a session waits for a lock (an advisory lock's holder has not committed). */
  const waitingOnLock = (pid: number) =>
    withPg(url, async (c) => {
      const { rows } = await c.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, [
        pid,
      ]);
      return rows.length > 0;
    });
  const nowBucket = async () =>
    Number((await db.query(`SELECT floor(extract(epoch FROM clock_timestamp()) * 1000 / 20)::bigint AS b`)).rows[0].b);
  /** Seals until every ticket has a place (the buckets end 20 ms apart). */
  const sealAll = () =>
    waitFor('every ticket placed', async () => {
      await seal();
      const { rows } = await db.query(
        `SELECT (SELECT count(*) FROM queue_tickets WHERE product_id = $1)::int AS tickets,
                (SELECT count(*) FROM queue_places($1))::int AS placed`,
        [product],
      );
      return rows[0].tickets === rows[0].placed;
    });

  it('puts a join before the start in the pre-queue and one after it in the bucket of the clock, one ticket per user', async () => {
    await room(60_000);
    const before = await join(['ann', 'bob', 'ann']);
    expect(before).toEqual([
      { user_id: 'ann', bucket: '0', position: null, created: true },
      { user_id: 'bob', bucket: '0', position: null, created: true },
      { user_id: 'ann', bucket: '0', position: null, created: false },
    ]);
    expect(
      (await db.query('SELECT sum(pre_joined)::int AS n FROM queue_counts WHERE product_id = $1', [product])).rows,
    ).toEqual([{ n: 2 }]);
    // The pre-queue stays open before the start: nothing is sealed.
    expect(await seal()).toEqual([]);
    await db.query(`UPDATE products SET starts_at = clock_timestamp() WHERE id = $1`, [product]);
    const from = await nowBucket();
    const after = await join(['cy', 'bob']);
    expect(after[1]).toEqual({ user_id: 'bob', bucket: '0', position: null, created: false });
    expect(Number(after[0].bucket)).toBeGreaterThanOrEqual(from);
    expect(Number(after[0].bucket)).toBeLessThanOrEqual(await nowBucket());
    // A product without a room: no row.
    expect((await db.query(`SELECT * FROM queue_join(999999, '{x}', '{y}')`)).rows).toEqual([]);
  });

  it("answers a group with the tickets it made and those its users had, looking the latter up by the product's primary key even for a product the table's statistics have not seen", async () => {
    // Another sale's tickets, analyzed: the new room's product is unknown to the statistics, which
    // reckon one ticket for it (and once took the smaller bucket index, reading all of its tickets per user).
    await room(null);
    const earlier = Array.from({ length: 3000 }, (_, i) => `e${i}`);
    await join(earlier);
    await db.query('ANALYZE queue_tickets');
    await room(null);
    const users = Array.from({ length: 300 }, (_, i) => `u${i}`);
    const made = await db.query(`SELECT user_id, ticket_id, created FROM queue_join($1, $2, $3)`, [
      product,
      users,
      users.map((u) => ticketOf(product, u)),
    ]);
    expect(made.rows).toEqual(users.map((u) => ({ user_id: u, ticket_id: ticketOf(product, u), created: true })));
    // In a session of its own, where the function has not been planned yet.
    const plans = await withPg(url, async (c) => {
      const notices: string[] = [];
      c.on('notice', (n: { message?: string }) => notices.push(n.message ?? ''));
      await c.query(`LOAD 'auto_explain'`);
      await c.query(`SET auto_explain.log_min_duration = 0`);
      await c.query(`SET auto_explain.log_nested_statements = on`);
      await c.query(`SET auto_explain.log_level = notice`);
      // The same users again, with another ticket id offered: each keeps the ticket they had.
      const again = await c.query(`SELECT user_id, ticket_id, created FROM queue_join($1, $2, $2)`, [product, users]);
      expect(again.rows).toEqual(users.map((u) => ({ user_id: u, ticket_id: ticketOf(product, u), created: false })));
      return notices;
    });
    const lookup = plans.filter((p) => p.includes('Query Text: SELECT g.u'));
    expect(lookup).toHaveLength(1);
    expect(lookup[0]).toContain('queue_tickets_pkey');
    expect(lookup[0]).not.toContain('queue_tickets_bucket');
  });

  it('seals the pre-queue at the start and every bucket once it has ended, in time order, places 1..n dense as recomputed from the revealed seeds', async () => {
    const { seed } = await room(300);
    await join(['p1', 'p2', 'p3', 'p4']);
    await waitFor('the start', async () => (await seal()).length > 0);
    const waves: string[][] = [];
    for (let wave = 0; wave < 4; wave++) {
      const users = Array.from({ length: 5 }, (_, i) => `w${wave}-${i}`);
      const last = Math.max(...(await join(users)).map((r) => Number(r.bucket)));
      waves.push(users);
      // The next wave joins once this one's buckets have been sealed.
      await waitFor(`bucket ${last} sealed`, async () => {
        await seal();
        return (await draws()).some((d) => d.bucket >= last);
      });
    }
    await sealAll();
    const all = await draws();
    // Draw 0 is the pre-queue with the room's own seed, committed by its hash.
    expect(all[0]).toMatchObject({ bucket: 0, draw: 0, first: 1, tickets: 4, seed });
    // Every later draw: the next index, the next positions, a seed that hashes to the seed before it
    // (or to the head of the chain it starts), and only for a bucket that had ended when sealed.
    const chains = (
      await db.query('SELECT first_draw, head FROM queue_chains WHERE product_id = $1 ORDER BY first_draw', [product])
    ).rows as Array<{ first_draw: number; head: Buffer }>;
    expect(chains.map((c) => c.first_draw)).toEqual([0, 1]);
    expect(chains[0].head).toEqual(sha256(seed));
    all.forEach((d, i) => {
      if (i === 0) return;
      expect(d.draw).toBe(i);
      expect(d.first).toBe(all[i - 1].first + all[i - 1].tickets);
      expect(d.bucket).toBeGreaterThan(all[i - 1].bucket);
      expect(sha256(d.seed as Buffer)).toEqual(i === 1 ? chains[1].head : all[i - 1].seed);
    });
    // Places: 1..24 once each, each bucket in its lottery order by its seed, recomputed here.
    const placed = await places();
    expect(placed.map((p) => p.position)).toEqual(Array.from({ length: 24 }, (_, i) => i + 1));
    for (const d of all) {
      const inBucket = placed.filter((p) => Number(p.bucket) === d.bucket);
      expect(inBucket.map((p) => p.ticket_id)).toEqual(
        recomputeLottery(
          (d.seed as Buffer).toString('hex'),
          inBucket.map((p) => p.ticket_id),
        ),
      );
      expect(inBucket[0].position).toBe(d.first);
    }
    // The waves: each sent after the one before was sealed lies wholly behind it.
    const at = (u: string) => placed.find((p) => p.user_id === u)?.position as number;
    for (let w = 1; w < waves.length; w++)
      expect(Math.min(...waves[w].map(at))).toBeGreaterThan(Math.max(...waves[w - 1].map(at)));
    // Sealing again changes nothing.
    await seal();
    expect(await places()).toEqual(placed);
  });

  it('waits for a join still writing to a bucket it seals, and counts it in', async () => {
    await room(null);
    await waitFor('the empty pre-queue sealed', async () => (await seal()).length > 0);
    const writer = new Client({ connectionString: url });
    await writer.connect();
    try {
      // A join in flight: its transaction holds its bucket's lock (shared) and has not committed.
      await writer.query('BEGIN');
      const [inFlight] = await join(['slow'], writer);
      const bucket = Number(inFlight.bucket);
      await waitFor('its bucket to end', async () => (await nowBucket()) > bucket);
      const pid = (await db.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
      const sealing = seal();
      const done = jest.fn();
      void sealing.then(done);
      await waitFor('the seal to wait for the join', () => waitingOnLock(pid));
      expect(done).not.toHaveBeenCalled();
      await writer.query('COMMIT');
      expect((await sealing).map((d) => [Number(d.bucket), d.tickets])).toContainEqual([bucket, 1]);
      expect((await places()).map((p) => [p.user_id, p.position])).toEqual([['slow', 1]]);
    } finally {
      await writer.end();
    }
  });

  it('seals in one statement what has ended and says which buckets it sealed; a second sealer at the same moment waits for the first and seals nothing', async () => {
    await room(null);
    const num = (v: string | null) => (v === null ? null : Number(v));
    const sealEnded = (on: Client = db) =>
      on
        .query(
          `SELECT bucket::text, draw, tickets, sealed_from::text AS "from", sealed_through::text AS through
             FROM queue_seal_ended($1)`,
          [product],
        )
        .then((r) =>
          r.rows.map((x) => ({
            bucket: num(x.bucket),
            draw: x.draw as number | null,
            tickets: x.tickets as number | null,
            from: Number(x.from),
            through: Number(x.through),
          })),
        );
    // The empty pre-queue first: bucket 0 drawn with no ticket.
    const first = await sealEnded();
    expect(first[0]).toMatchObject({ bucket: 0, tickets: 0, from: 0 });
    const joined = await join(['a', 'b', 'c']);
    const bucket = Number(joined[0].bucket);
    await waitFor('its bucket to end', async () => (await nowBucket()) > bucket);
    // Two sealers at once: one holds the room's row (here in an open transaction), the other waits for it.
    const holder = new Client({ connectionString: url });
    const second = new Client({ connectionString: url });
    await Promise.all([holder.connect(), second.connect()]);
    try {
      await holder.query('BEGIN');
      const made = await sealEnded(holder);
      const pid = (await second.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
      const waiting = sealEnded(second);
      await waitFor('the second sealer to wait for the first', () => waitingOnLock(pid));
      await holder.query('COMMIT');
      const after = await waiting;
      const drawn = made.filter((r) => r.bucket !== null);
      expect(drawn.map((r) => [r.bucket, r.tickets])).toEqual([[bucket, 3]]);
      expect(made.every((r) => r.from === first[0].through + 1 && r.through >= bucket)).toBe(true);
      // The second: nothing sealed (from just after the first's through), one row without a bucket.
      expect(after).toHaveLength(1);
      expect(after[0]).toMatchObject({ bucket: null, draw: null, tickets: null });
      expect(after[0].from).toBe(made[0].through + 1);
      expect(after[0].through).toBeGreaterThanOrEqual(after[0].from - 1);
    } finally {
      await Promise.all([holder.end(), second.end()]);
    }
    expect((await places()).map((p) => p.user_id).sort()).toEqual(['a', 'b', 'c']);
    // A product without a room: no row.
    expect((await db.query('SELECT * FROM queue_seal_ended(999999)')).rows).toEqual([]);
  });

  it("seals the pre-queue at the start locking the pre-queue and the sale's ended buckets only, not the one joins now write to", async () => {
    await room(60_000);
    await join(['pre']);
    const [{ start }] = (
      await db.query(
        `UPDATE products SET starts_at = clock_timestamp() WHERE id = $1
         RETURNING floor(extract(epoch FROM starts_at) * 1000 / 20)::bigint AS start`,
        [product],
      )
    ).rows;
    await waitFor('two buckets of the sale to end', async () => (await nowBucket()) > Number(start) + 2);
    await db.query('BEGIN');
    try {
      await db.query('SELECT * FROM queue_seal($1)', [product]);
      // Bits 4..9 of the lock's key are the bucket's slot: the pre-queue's (0) and the sale's ended
      // buckets', not all 64 (which a join of the bucket of now would have to wait behind).
      const { rows } = await db.query(
        `SELECT DISTINCT ((objid::bigint >> 4) & 63)::int AS slot FROM pg_locks
          WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND mode = 'ExclusiveLock'`,
      );
      const slots = rows.map((r) => r.slot as number).sort((x, y) => x - y);
      const { rows: after } = await db.query(
        'SELECT sealed_through::bigint AS s FROM waiting_rooms WHERE product_id = $1',
        [product],
      );
      const ended = Array.from({ length: Number(after[0].s) - Number(start) + 1 }, (_, i) => (Number(start) + i) % 64);
      expect(slots).toEqual([...new Set([0, ...ended])].sort((x, y) => x - y));
      expect(slots.length).toBeLessThan(64);
    } finally {
      await db.query('COMMIT');
    }
  });

  it('sends a join that finds its bucket sealed (here the pre-queue, the start moved after its draw) to the bucket of now, behind it', async () => {
    await room(60_000);
    await join(['pre']);
    await db.query(`UPDATE products SET starts_at = clock_timestamp() WHERE id = $1`, [product]);
    // The seal of the pre-queue holds its bucket's lock until it commits ...
    const sealer = new Client({ connectionString: url });
    const joiner = new Client({ connectionString: url });
    await Promise.all([sealer.connect(), joiner.connect()]);
    try {
      await sealer.query('BEGIN');
      const made = await sealer.query('SELECT bucket::int FROM queue_seal($1)', [product]);
      expect(made.rows[0]).toEqual({ bucket: 0 });
      // ... when the start moves a minute on, and a join, by the clock before it, comes for the pre-queue:
      await db.query(`UPDATE products SET starts_at = clock_timestamp() + interval '1 minute' WHERE id = $1`, [
        product,
      ]);
      const pid = (await joiner.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
      const late = join(['late'], joiner);
      const joined = jest.fn();
      void late.then(joined);
      await waitFor('the join to wait for the seal', () => waitingOnLock(pid));
      expect(joined).not.toHaveBeenCalled();
      await sealer.query('COMMIT');
      const [answer] = await late;
      expect(Number(answer.bucket)).toBeGreaterThan(0);
      await db.query(`UPDATE products SET starts_at = clock_timestamp() WHERE id = $1`, [product]);
      await sealAll();
      expect((await places()).map((p) => [p.user_id, p.position])).toEqual([
        ['pre', 1],
        ['late', 2],
      ]);
    } finally {
      await Promise.all([sealer.end(), joiner.end()]);
    }
  });

  it('makes the next chain of seeds 64 draws before the one in force runs out, its head public from then on', async () => {
    await room(null);
    await waitFor('the empty pre-queue sealed', async () => (await seal()).length > 0);
    // As if 4,031 buckets had been drawn: the chain of draws 1..4096 has 65 left.
    await db.query('UPDATE waiting_rooms SET draws = 4032 WHERE product_id = $1', [product]);
    await join(['x']);
    await sealAll();
    const chains = (
      await db.query(
        `SELECT first_draw, length, head, elements, made_at FROM queue_chains WHERE product_id = $1 ORDER BY first_draw`,
        [product],
      )
    ).rows as Array<{ first_draw: number; length: number; head: Buffer; elements: Buffer; made_at: Date }>;
    expect(chains.map((c) => [c.first_draw, c.length])).toEqual([
      [0, 1],
      [1, 4096],
      [4097, 4096],
    ]);
    // Its elements hash one to the next, the last to its head; and it is none of the earlier chains.
    const next = chains[2];
    for (let i = 1; i < 4096; i++)
      expect(sha256(next.elements.subarray((i - 1) * 32, i * 32))).toEqual(next.elements.subarray(i * 32, i * 32 + 32));
    expect(sha256(next.elements.subarray(4095 * 32))).toEqual(next.head);
    expect(next.head).not.toEqual(chains[1].head);
    // Draw 4032 is the 4032nd of chain 1: its element 4096 - 4032 = 64 from the root.
    const [drawn] = await draws().then((d) => d.filter((x) => x.draw === 4032));
    expect(drawn.seed).toEqual(chains[1].elements.subarray(64 * 32, 65 * 32));
  });

  it("dates an admission step by the moment it holds the room's row: a step whose transaction began first but took the row second is dated after the step that took it first", async () => {
    // Two processes' admitters: the first begins its transaction and is held up before it takes the
    // room's row (a busy event loop), the second makes a whole step meanwhile.
    const { id } = await room(null);
    const slow = await new DataSource(dataSourceOptions(url, { poolSize: 1 })).initialize();
    const fast = await new DataSource(dataSourceOptions(url, { poolSize: 1 })).initialize();
    try {
      let go = () => {};
      const held = new Promise<void>((resolve) => (go = resolve));
      let begun = () => {};
      const began = new Promise<void>((resolve) => (begun = resolve));
      const begin = slow.transaction.bind(slow) as (work: (m: EntityManager) => Promise<unknown>) => Promise<unknown>;
      slow.transaction = ((work: (m: EntityManager) => Promise<unknown>) =>
        begin(async (m) => {
          begun();
          await held;
          return work(m);
        })) as typeof slow.transaction;
      const step = (repo: WaitingRoomRepository) =>
        repo.exclusively(id, async (q) => repo.admit(q, id, await repo.admissionState(q, id), 2, 60));

      const later = step(new WaitingRoomRepository(slow));
      await began;
      const first = await step(new WaitingRoomRepository(fast));
      go();
      const second = await later;

      expect(first?.first).toBe(1);
      expect(second?.first).toBe(3);
      expect(second!.admittedAt).toBeGreaterThanOrEqual(first!.admittedAt);
      expect(second!.expiresAt).toBeGreaterThanOrEqual(first!.expiresAt);
      const { rows } = await db.query(
        `SELECT first_position::int AS first FROM admission_batches WHERE product_id = $1 ORDER BY admitted_at, first_position`,
        [id],
      );
      expect(rows.map((r) => r.first)).toEqual([1, 3]);
    } finally {
      await slow.destroy();
      await fast.destroy();
    }
  });
});

describe('the buckets migration on rooms made before it', () => {
  const url = urlOf(`${DATABASE}_migration`);

  beforeAll(async () => {
    await withPg(testUrls().databaseUrl, async (c) => {
      await c.query(`DROP DATABASE IF EXISTS ${DATABASE}_migration WITH (FORCE)`);
      await c.query(`CREATE DATABASE ${DATABASE}_migration`);
    });
  });
  afterAll(async () => {
    await withPg(testUrls().databaseUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${DATABASE}_migration WITH (FORCE)`));
  });

  it('keeps every place handed out, draws an open pre-queue as it would have been drawn, and goes back keeping the places', async () => {
    // Every migration before this one.
    const glob = await new DataSource({ ...dataSourceOptions(url, { poolSize: 1 }) }).initialize();
    const at = glob.migrations.findIndex((m) => m.name === QueueBuckets1764500000000.name);
    const earlier = glob.migrations.slice(0, at);
    await glob.destroy();
    const before = await new DataSource({
      ...dataSourceOptions(url, { poolSize: 1 }),
      migrations: earlier.map((m) => m.constructor as never),
    }).initialize();
    await before.runMigrations({ transaction: 'each' });
    await before.destroy();
    const seeds = [randomBytes(32), randomBytes(32)];
    const old = await withPg(url, async (c) => {
      for (const id of [1, 2]) {
        await c.query(
          `INSERT INTO products (id, name, total_stock, segment_count, waiting_room) VALUES ($1, 'p', 10, 1, true)`,
          [id],
        );
        await c.query(`INSERT INTO waiting_rooms (product_id, seed, seed_hash) VALUES ($1, $2, $3)`, [
          id,
          seeds[id - 1],
          sha256Hex(seeds[id - 1]),
        ]);
        const users = Array.from({ length: 12 }, (_, i) => `u${i}`);
        const tickets = users.map((u) => ticketOf(id, u));
        const keys = tickets.map((t) =>
          createHmac('sha256', seeds[id - 1])
            .update(t)
            .digest(),
        );
        // Product 1: a pre-queue not drawn yet. Product 2: drawn, then arrivals numbered on arrival.
        await c.query(`SELECT count(*) FROM queue_join($1, false, $2, $3, $4)`, [
          id,
          users.slice(0, 6),
          tickets.slice(0, 6),
          keys.slice(0, 6),
        ]);
        if (id === 2)
          await c.query(`SELECT count(*) FROM queue_join($1, true, $2, $3, $4)`, [
            id,
            users.slice(6),
            tickets.slice(6),
            keys.slice(6),
          ]);
      }
      return (await c.query(`SELECT user_id, position::int FROM queue_tickets WHERE product_id = 2 ORDER BY position`))
        .rows;
    });
    expect(old.map((r) => r.position)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));

    const ds = await new DataSource({
      ...dataSourceOptions(url, { poolSize: 1 }),
      migrations: [...earlier.map((m) => m.constructor as never), QueueBuckets1764500000000],
    }).initialize();
    try {
      await ds.runMigrations({ transaction: 'each' });
      await withPg(url, async (c) => {
        const places = async (id: number) =>
          (await c.query(`SELECT user_id, ticket_id, position::int FROM queue_places($1) ORDER BY position`, [id]))
            .rows;
        // The drawn room: the same places, the pre-queue as draw 0 and the arrivals as a block of their own.
        expect((await places(2)).map((r) => ({ user_id: r.user_id, position: r.position }))).toEqual(old);
        expect(
          (
            await c.query(
              `SELECT bucket::int, draw, first_position::int, tickets FROM queue_draws WHERE product_id = 2 ORDER BY bucket`,
            )
          ).rows,
        ).toEqual([
          { bucket: 0, draw: 0, first_position: 1, tickets: 6 },
          { bucket: 1, draw: null, first_position: 7, tickets: 6 },
        ]);
        // The open pre-queue, sealed now, is drawn by the room's seed as the old draw would have drawn it.
        await c.query('BEGIN');
        await c.query('SELECT * FROM queue_seal(1)');
        await c.query('COMMIT');
        const drawn = await places(1);
        expect(drawn.map((r) => r.ticket_id)).toEqual(
          recomputeLottery(
            seeds[0].toString('hex'),
            drawn.map((r) => r.ticket_id),
          ),
        );
        // Later joins of the drawn room go to buckets and follow its 12 places.
        await c.query(`SELECT * FROM queue_join(2, '{late}', $1)`, [[ticketOf(2, 'late')]]);
        await waitFor('the late join placed', async () => {
          await c.query('BEGIN');
          await c.query('SELECT * FROM queue_seal(2)');
          await c.query('COMMIT');
          return (await places(2)).some((r) => r.user_id === 'late' && r.position === 13);
        });
      });
      // Back: every place kept as a number, the pre-queue's lottery keys made again.
      await ds.undoLastMigration({ transaction: 'each' });
      await withPg(url, async (c) => {
        const back = (
          await c.query(`SELECT user_id, kind, position::int FROM queue_tickets WHERE product_id = 2 ORDER BY position`)
        ).rows;
        expect(back.map((r) => r.position)).toEqual(Array.from({ length: 13 }, (_, i) => i + 1));
        expect(back[12]).toEqual({ user_id: 'late', kind: 'a', position: 13 });
        expect((await c.query(`SELECT pre_queue, arrivals::int FROM queue_counts WHERE product_id = 2`)).rows).toEqual([
          { pre_queue: 6, arrivals: 7 },
        ]);
        const keyed = await c.query(
          `SELECT count(*)::int AS n FROM queue_tickets WHERE kind = 'p' AND lottery_key IS NOT NULL`,
        );
        expect(keyed.rows).toEqual([{ n: 12 }]);
      });
    } finally {
      await ds.destroy();
    }
  });
});
