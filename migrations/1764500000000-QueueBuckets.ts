// The queue's intake spreads: a join no longer numbers its ticket under the product's counter row.
// Time is cut into buckets (the room's `bucket_ms`, by PostgreSQL's clock); a join writes its
// ticket with its bucket number, holding only a shared advisory lock on its bucket (one of 16
// stripes, so no single lock is taken by every join), and is answered once committed. The
// pre-queue is bucket 0. Buckets are sealed in time order by whichever process holds the room's
// row: the seal takes the exclusive lock of every bucket it closes (so every join of them has
// committed, and a join that comes later finds its bucket sealed and moves to the next), counts
// each bucket's tickets and records one draw per non-empty bucket: its first position (the
// tickets of the earlier buckets, plus one) and its seed. A ticket's position is its bucket's
// first position plus its rank in the bucket by HMAC-SHA256(seed, ticket id): fixed by what the
// seal commits, and recomputable by anyone from the published draws (queue_places() does it here).
// The seeds form hash chains (queue_chains): a chain's head, SHA-256 applied `length` times to a
// secret root, is public from the moment it is made; draw after draw reveals the chain's elements
// backwards, each hashing to the one revealed before it, so no seed can be foreseen from those
// revealed and none can be changed once the head is out. The pre-queue's draw keeps the room's own
// seed, committed by `seed_hash` as before (a chain of length 1). The draws' order of tickets
// (`keys`, the 8-byte prefixes of their lottery keys in drawn order) is written by the service after
// the seal, for any process to place a ticket by binary search; it is derived, not a record.
// Rooms that already exist keep every position they handed out: a drawn pre-queue becomes draw 0,
// and the arrivals numbered on arrival become a block of their own (bucket 1, no seed).
// Frozen: every function this migration installs, or restores going back, is written out here.
import { MigrationInterface, QueryRunner } from 'typeorm';

export class QueueBuckets1764500000000 implements MigrationInterface {
  name = 'QueueBuckets1764500000000';

  public async up(q: QueryRunner): Promise<void> {
    // Tickets: their bucket instead of a kind; the lottery key is computed where it is needed.
    await q.query('ALTER TABLE queue_tickets ADD COLUMN bucket bigint');
    await q.query(`UPDATE queue_tickets SET bucket = CASE kind WHEN 'p' THEN 0 ELSE 1 END`);
    await q.query('ALTER TABLE queue_tickets ALTER COLUMN bucket SET NOT NULL');
    await q.query('ALTER TABLE queue_tickets DROP COLUMN kind, DROP COLUMN lottery_key');
    await q.query('CREATE INDEX queue_tickets_bucket ON queue_tickets (product_id, bucket)');

    await q.query(`
      ALTER TABLE waiting_rooms
        ADD COLUMN bucket_ms      integer NOT NULL DEFAULT 100 CHECK (bucket_ms BETWEEN 10 AND 60000),
        ADD COLUMN sealed_through bigint  NOT NULL DEFAULT -1,
        ADD COLUMN draws          integer NOT NULL DEFAULT 0`);
    await q.query(`
      CREATE TABLE queue_draws (
        product_id     integer     NOT NULL REFERENCES products(id) ON DELETE CASCADE,
        bucket         bigint      NOT NULL,
        draw           integer,
        first_position bigint      NOT NULL CHECK (first_position >= 1),
        tickets        integer     NOT NULL CHECK (tickets >= 0),
        seed           bytea,
        drawn_at       timestamptz NOT NULL,
        keys           bytea,
        PRIMARY KEY (product_id, bucket),
        UNIQUE (product_id, draw),
        CHECK ((draw IS NULL) = (seed IS NULL))
      )`);
    await q.query(`
      CREATE TABLE queue_chains (
        product_id integer     NOT NULL REFERENCES products(id) ON DELETE CASCADE,
        first_draw integer     NOT NULL,
        length     integer     NOT NULL CHECK (length >= 1),
        head       bytea       NOT NULL,
        elements   bytea       NOT NULL,
        made_at    timestamptz NOT NULL,
        PRIMARY KEY (product_id, first_draw)
      )`);
    // A seal reads 32 bytes of a chain: stored uncompressed (hashes do not compress), a slice is
    // read without the whole value.
    await q.query('ALTER TABLE queue_chains ALTER COLUMN elements SET STORAGE EXTERNAL');

    // The pre-queue's count as it fills, in 16 rows per room (a join adds to the row of its
    // session's stripe), so that the pre-queue's joins hold no row in common.
    await q.query('ALTER TABLE queue_counts DROP CONSTRAINT queue_counts_pkey');
    await q.query('ALTER TABLE queue_counts ADD COLUMN stripe smallint NOT NULL DEFAULT 0');
    await q.query('ALTER TABLE queue_counts ADD PRIMARY KEY (product_id, stripe)');
    await q.query(`
      INSERT INTO queue_counts (product_id, stripe, pre_joined)
      SELECT c.product_id, s, 0 FROM queue_counts c, generate_series(1, 15) s`);

    await q.query(QUEUE_CHAIN_MAKE);
    await q.query(QUEUE_ROOM_MADE);
    await q.query('DROP TRIGGER queue_counts_for_room ON waiting_rooms');
    await q.query('DROP FUNCTION queue_counts_for_room()');
    await q.query(`
      CREATE TRIGGER queue_room_made AFTER INSERT ON waiting_rooms
        FOR EACH ROW EXECUTE FUNCTION queue_room_made()`);

    // The rooms there are: a drawn pre-queue is draw 0, arrivals numbered on arrival a block of
    // their own; each room gets its first chain (the pre-queue's seed) and a chain for what follows.
    await q.query(`
      INSERT INTO queue_chains (product_id, first_draw, length, head, elements, made_at)
      SELECT product_id, 0, 1, decode(seed_hash, 'hex'), seed, clock_timestamp() FROM waiting_rooms`);
    await q.query(`SELECT queue_chain_make(product_id, 1, 4096) FROM waiting_rooms`);
    await q.query(`
      UPDATE waiting_rooms w
         SET pre_queue = c.pre_queue, drawn_at = COALESCE(w.drawn_at, clock_timestamp()),
             high_water = c.pre_queue + c.arrivals, sealed_through = 1, draws = 1
        FROM queue_counts c
       WHERE c.product_id = w.product_id AND c.stripe = 0 AND c.pre_queue IS NOT NULL`);
    await q.query(`
      INSERT INTO queue_draws (product_id, bucket, draw, first_position, tickets, seed, drawn_at)
      SELECT w.product_id, 0, 0, 1, w.pre_queue, w.seed, w.drawn_at FROM waiting_rooms w WHERE w.draws = 1`);
    await q.query(`
      INSERT INTO queue_draws (product_id, bucket, draw, first_position, tickets, seed, drawn_at)
      SELECT w.product_id, 1, NULL, w.pre_queue + 1, w.high_water - w.pre_queue, NULL, w.drawn_at
        FROM waiting_rooms w WHERE w.draws = 1 AND w.high_water > w.pre_queue`);
    await q.query('ALTER TABLE queue_counts DROP COLUMN pre_queue, DROP COLUMN arrivals');

    await q.query('DROP FUNCTION queue_join(integer, boolean, text[], text[], bytea[])');
    await q.query('DROP FUNCTION queue_draw(integer)');
    await q.query(QUEUE_JOIN);
    await q.query(QUEUE_SEAL);
    await q.query(QUEUE_HMAC_PADS);
    await q.query(QUEUE_PLACES);
  }

  public async down(q: QueryRunner): Promise<void> {
    // Back to one number per ticket: every sealed ticket keeps the place it was drawn to; tickets of
    // buckets not yet sealed follow as arrivals, in the order they joined; an unsealed pre-queue
    // stays a pre-queue, its lottery keys computed again from the room's seed.
    await q.query('ALTER TABLE queue_tickets ADD COLUMN kind char(1), ADD COLUMN lottery_key bytea');
    await q.query(`
      UPDATE queue_tickets t SET position = p.position
        FROM waiting_rooms w, queue_places(w.product_id) p
       WHERE t.product_id = w.product_id AND p.user_id = t.user_id AND t.position IS NULL`);
    await q.query(`
      UPDATE queue_tickets t SET position = w.high_water + o.rn
        FROM waiting_rooms w,
             (SELECT x.product_id, x.user_id,
                     row_number() OVER (PARTITION BY x.product_id ORDER BY x.bucket, x.joined_at, x.user_id) AS rn
                FROM queue_tickets x JOIN waiting_rooms r ON r.product_id = x.product_id
               WHERE x.bucket > r.sealed_through AND x.bucket > 0) o
       WHERE w.product_id = o.product_id AND t.product_id = o.product_id AND t.user_id = o.user_id`);
    await q.query(`UPDATE queue_tickets SET kind = CASE WHEN bucket = 0 THEN 'p' ELSE 'a' END`);
    await q.query(`
      UPDATE queue_tickets t SET lottery_key = sha256(k.opad || sha256(k.ipad || convert_to(t.ticket_id, 'UTF8')))
        FROM waiting_rooms w, queue_hmac_pads(w.seed) k
       WHERE t.product_id = w.product_id AND t.bucket = 0`);
    await q.query('ALTER TABLE queue_tickets ALTER COLUMN kind SET NOT NULL');
    await q.query(`ALTER TABLE queue_tickets ADD CHECK (kind IN ('p', 'a'))`);
    await q.query(`ALTER TABLE queue_tickets ADD CHECK (kind = 'a' OR lottery_key IS NOT NULL)`);
    await q.query(`ALTER TABLE queue_tickets ADD CHECK (kind = 'p' OR position IS NOT NULL)`);

    await q.query(
      'ALTER TABLE queue_counts ADD COLUMN pre_queue integer, ADD COLUMN arrivals bigint NOT NULL DEFAULT 0',
    );
    await q.query('DELETE FROM queue_counts WHERE stripe > 0');
    await q.query(`
      UPDATE queue_counts c
         SET pre_queue = CASE WHEN w.sealed_through >= 0 THEN w.pre_queue END,
             pre_joined = (SELECT count(*) FROM queue_tickets t WHERE t.product_id = c.product_id AND t.kind = 'p'),
             arrivals = (SELECT count(*) FROM queue_tickets t WHERE t.product_id = c.product_id AND t.kind = 'a')
        FROM waiting_rooms w WHERE w.product_id = c.product_id`);
    await q.query('ALTER TABLE queue_counts DROP CONSTRAINT queue_counts_pkey');
    await q.query('ALTER TABLE queue_counts DROP COLUMN stripe');
    await q.query('ALTER TABLE queue_counts ADD PRIMARY KEY (product_id)');
    await q.query(`
      UPDATE waiting_rooms w SET high_water = COALESCE(c.pre_queue, 0) + c.arrivals
        FROM queue_counts c WHERE c.product_id = w.product_id`);

    await q.query('DROP FUNCTION queue_places(integer)');
    await q.query('DROP FUNCTION queue_hmac_pads(bytea)');
    await q.query('DROP FUNCTION queue_seal(integer)');
    await q.query('DROP FUNCTION queue_join(integer, text[], text[])');
    await q.query('DROP TRIGGER queue_room_made ON waiting_rooms');
    await q.query('DROP FUNCTION queue_room_made()');
    await q.query('DROP FUNCTION queue_chain_make(integer, integer, integer)');
    await q.query(QUEUE_COUNTS_FOR_ROOM_BEFORE);
    await q.query(`
      CREATE TRIGGER queue_counts_for_room AFTER INSERT ON waiting_rooms
        FOR EACH ROW EXECUTE FUNCTION queue_counts_for_room()`);
    await q.query(QUEUE_DRAW_BEFORE);
    await q.query(QUEUE_JOIN_BEFORE);

    await q.query('DROP TABLE queue_chains');
    await q.query('DROP TABLE queue_draws');
    await q.query('ALTER TABLE waiting_rooms DROP COLUMN bucket_ms, DROP COLUMN sealed_through, DROP COLUMN draws');
    await q.query('DROP INDEX queue_tickets_bucket');
    await q.query('ALTER TABLE queue_tickets DROP COLUMN bucket');
  }
}

/**
 * A hash chain for the draws from `p_first_draw` on: a secret root (from PostgreSQL's strong
 * random source), its elements root, H(root), ..., H^(length-1)(root) kept secret in order, and its
 * head H^length(root) public. Draw first_draw + j uses element length-1-j, which hashes to the
 * element drawn before it (to the head for j = 0).
 */
const QUEUE_CHAIN_MAKE = `
      CREATE FUNCTION queue_chain_make(p_product integer, p_first_draw integer, p_length integer) RETURNS void
      LANGUAGE sql AS $fn$
        WITH RECURSIVE chain(i, x) AS (
          SELECT 0, sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text || clock_timestamp()::text, 'UTF8'))
          UNION ALL
          SELECT i + 1, sha256(x) FROM chain WHERE i < p_length)
        INSERT INTO queue_chains (product_id, first_draw, length, head, elements, made_at)
        SELECT p_product, p_first_draw, p_length,
               string_agg(x, ''::bytea) FILTER (WHERE i = p_length),
               string_agg(x, ''::bytea ORDER BY i) FILTER (WHERE i < p_length),
               clock_timestamp()
          FROM chain
      $fn$`;

/**
 * A room's queue, made with the room (in its transaction): the pre-queue's count rows, the
 * pre-queue's chain (the room's seed, committed by its seed_hash) and the first chain of the
 * draws after it. A room made again starts from zero.
 */
const QUEUE_ROOM_MADE = `
      CREATE FUNCTION queue_room_made() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        INSERT INTO queue_counts (product_id, stripe) SELECT NEW.product_id, s FROM generate_series(0, 15) s
          ON CONFLICT (product_id, stripe) DO UPDATE SET pre_joined = 0;
        DELETE FROM queue_chains WHERE product_id = NEW.product_id;
        DELETE FROM queue_draws WHERE product_id = NEW.product_id;
        INSERT INTO queue_chains (product_id, first_draw, length, head, elements, made_at)
          VALUES (NEW.product_id, 0, 1, decode(NEW.seed_hash, 'hex'), NEW.seed, clock_timestamp());
        PERFORM queue_chain_make(NEW.product_id, 1, 4096);
        RETURN NULL;
      END
      $fn$`;

/**
 * One group of joins, in the order given: each user's ticket, made now (created) or the one they
 * had. A new ticket goes to the bucket of PostgreSQL's clock: the pre-queue (0) before the
 * product's starts_at, else floor(epoch ms / bucket_ms). The join holds its bucket's lock shared
 * (one of 16 stripes, by session) until it commits; if the bucket is sealed already, the ticket
 * goes to the bucket of now instead. Nothing here is held by every join: joins of one product run
 * side by side. Returns no row when the product has no room.
 */
const QUEUE_JOIN = `
      CREATE FUNCTION queue_join(p_product integer, p_users text[], p_tickets text[])
      RETURNS TABLE (user_id text, ticket_id text, bucket bigint, "position" bigint, created boolean)
      LANGUAGE plpgsql AS $fn$
      #variable_conflict use_column
      DECLARE
        v_ms integer;
        v_starts timestamptz;
        v_at timestamptz := clock_timestamp();
        v_bucket bigint;
        v_sealed bigint;
        v_made bigint;
        v_stripe integer := pg_backend_pid() % 16;
      BEGIN
        SELECT w.bucket_ms, p.starts_at INTO v_ms, v_starts
          FROM waiting_rooms w JOIN products p ON p.id = w.product_id WHERE w.product_id = p_product;
        IF NOT FOUND THEN RETURN; END IF;
        v_bucket := CASE WHEN v_starts IS NOT NULL AND v_at < v_starts THEN 0
                         ELSE floor(extract(epoch FROM v_at) * 1000 / v_ms)::bigint END;
        LOOP
          -- The lock's key: the queue's mark, the product, the bucket's slot of 64, the stripe.
          PERFORM pg_advisory_xact_lock_shared(
            (x'51'::bigint << 56) | (p_product::bigint << 10) | ((v_bucket % 64) << 4) | v_stripe);
          SELECT w.sealed_through INTO v_sealed FROM waiting_rooms w WHERE w.product_id = p_product;
          EXIT WHEN v_sealed < v_bucket;
          v_bucket := GREATEST(v_sealed + 1, floor(extract(epoch FROM clock_timestamp()) * 1000 / v_ms)::bigint);
        END LOOP;
        WITH made AS (
          INSERT INTO queue_tickets (product_id, user_id, ticket_id, bucket)
          SELECT p_product, g.u, g.t, v_bucket
            FROM unnest(p_users, p_tickets) WITH ORDINALITY AS g(u, t, o)
           ORDER BY g.o
          ON CONFLICT (product_id, user_id) DO NOTHING
          RETURNING 1)
        SELECT count(*) INTO v_made FROM made;
        IF v_bucket = 0 AND v_made > 0 THEN
          UPDATE queue_counts c SET pre_joined = c.pre_joined + v_made
           WHERE c.product_id = p_product AND c.stripe = v_stripe;
        END IF;
        -- Each user's ticket by a probe of its own (a LATERAL subquery with OFFSET 0 is never
        -- flattened into a join). Made now: a row this transaction wrote, said of the first time
        -- its user appears in the group.
        RETURN QUERY
          SELECT g.u, x.ticket_id::text, x.bucket, x.position,
                 x.mine AND g.o = min(g.o) OVER (PARTITION BY g.u)
            FROM unnest(p_users) WITH ORDINALITY AS g(u, o)
           CROSS JOIN LATERAL (
                 SELECT t.ticket_id, t.bucket, t.position, t.xmin = pg_current_xact_id()::xid AS mine
                   FROM queue_tickets t WHERE t.product_id = p_product AND t.user_id = g.u
                 OFFSET 0) x
           ORDER BY g.o;
      END
      $fn$`;

/**
 * Seals every bucket that has ended, in time order; called holding the room's row. The pre-queue
 * (bucket 0) once the product's start has come, drawn even when empty (its seed is revealed then);
 * then every time bucket before the one of PostgreSQL's clock now. The exclusive lock of each
 * bucket sealed (its 16 stripes; 64 slots at most, which cover every bucket) waits for its joins to
 * commit and sends the later ones to a later bucket; the buckets between the pre-queue and the
 * start's are empty by construction and not locked. Each non-empty bucket is one draw: its first
 * position follows the tickets of the buckets before it, and its seed is the next element of the
 * chain in force. A chain is extended 64 draws before it runs out, so its head is public long
 * before any ticket of the buckets it will draw has joined. Returns the draws made.
 */
const QUEUE_SEAL = `
      CREATE FUNCTION queue_seal(p_product integer)
      RETURNS TABLE (bucket bigint, draw integer, first_position bigint, tickets integer, seed bytea)
      LANGUAGE plpgsql AS $fn$
      #variable_conflict use_column
      DECLARE
        v_now timestamptz := clock_timestamp();
        v_starts timestamptz;
        v_ms integer;
        v_from bigint;
        v_last bigint;
        v_slot bigint;
        v_lock_to bigint;
        v_draw integer;
        v_placed bigint;
        v_pre integer;
        r record;
        c record;
      BEGIN
        SELECT w.bucket_ms, w.sealed_through + 1, w.draws, w.high_water, p.starts_at
          INTO v_ms, v_from, v_draw, v_placed, v_starts
          FROM waiting_rooms w JOIN products p ON p.id = w.product_id
         WHERE w.product_id = p_product FOR UPDATE OF w;
        IF NOT FOUND THEN RETURN; END IF;
        -- The pre-queue stays open until the start.
        IF v_from = 0 AND v_starts IS NOT NULL AND v_now < v_starts THEN RETURN; END IF;
        v_last := floor(extract(epoch FROM v_now) * 1000 / v_ms)::bigint - 1;
        IF v_last < v_from THEN RETURN; END IF;
        -- The buckets whose joins may still be writing: locked. At the pre-queue's seal these are
        -- the pre-queue and the buckets from the start on (a join before the start went to the
        -- pre-queue), so a sale's first seal does not hold the joins of its first moments.
        v_slot := v_from;
        IF v_from = 0 AND v_starts IS NOT NULL THEN
          FOR s IN 0 .. 15 LOOP
            PERFORM pg_advisory_xact_lock((x'51'::bigint << 56) | (p_product::bigint << 10) | s);
          END LOOP;
          v_slot := GREATEST(1, floor(extract(epoch FROM v_starts) * 1000 / v_ms)::bigint);
        END IF;
        v_lock_to := LEAST(v_last, v_slot + 63);
        WHILE v_slot <= v_lock_to LOOP
          FOR s IN 0 .. 15 LOOP
            PERFORM pg_advisory_xact_lock((x'51'::bigint << 56) | (p_product::bigint << 10) | ((v_slot % 64) << 4) | s);
          END LOOP;
          v_slot := v_slot + 1;
        END LOOP;
        FOR r IN
          SELECT t.bucket AS b, count(*)::integer AS n FROM queue_tickets t
           WHERE t.product_id = p_product AND t.bucket BETWEEN v_from AND v_last GROUP BY t.bucket
          UNION ALL
          SELECT 0, 0 WHERE v_from = 0
             AND NOT EXISTS (SELECT 1 FROM queue_tickets t WHERE t.product_id = p_product AND t.bucket = 0)
          ORDER BY 1
        LOOP
          SELECT x.first_draw, x.length, x.elements INTO c FROM queue_chains x
           WHERE x.product_id = p_product AND x.first_draw <= v_draw ORDER BY x.first_draw DESC LIMIT 1;
          IF NOT FOUND OR v_draw >= c.first_draw + c.length THEN
            RAISE EXCEPTION 'no seed committed for draw % of product %', v_draw, p_product;
          END IF;
          bucket := r.b;
          draw := v_draw;
          first_position := v_placed + 1;
          tickets := r.n;
          seed := substring(c.elements FROM (c.first_draw + c.length - 1 - v_draw) * 32 + 1 FOR 32);
          INSERT INTO queue_draws (product_id, bucket, draw, first_position, tickets, seed, drawn_at)
            VALUES (p_product, bucket, draw, first_position, tickets, seed, v_now);
          IF r.b = 0 THEN v_pre := r.n; END IF;
          v_placed := v_placed + r.n;
          v_draw := v_draw + 1;
          RETURN NEXT;
          IF v_draw + 64 >= c.first_draw + c.length AND NOT EXISTS (
               SELECT 1 FROM queue_chains x WHERE x.product_id = p_product AND x.first_draw = c.first_draw + c.length) THEN
            PERFORM queue_chain_make(p_product, c.first_draw + c.length, 4096);
          END IF;
        END LOOP;
        UPDATE waiting_rooms w
           SET sealed_through = v_last, draws = v_draw, high_water = v_placed,
               pre_queue = CASE WHEN v_from = 0 THEN v_pre ELSE w.pre_queue END,
               drawn_at = CASE WHEN v_from = 0 THEN v_now ELSE w.drawn_at END
         WHERE w.product_id = p_product;
      END
      $fn$`;

/** HMAC-SHA256's inner and outer key blocks for a key of at most 64 bytes (RFC 2104). */
const QUEUE_HMAC_PADS = `
      CREATE FUNCTION queue_hmac_pads(p_key bytea, OUT ipad bytea, OUT opad bytea)
      LANGUAGE plpgsql IMMUTABLE STRICT AS $fn$
      DECLARE
        k bytea;
      BEGIN
        IF length(p_key) > 64 THEN RAISE EXCEPTION 'an HMAC key longer than 64 bytes'; END IF;
        k := p_key || decode(repeat('00', 64 - length(p_key)), 'hex');
        ipad := k;
        opad := k;
        FOR i IN 0 .. 63 LOOP
          ipad := set_byte(ipad, i, get_byte(k, i) # 54);
          opad := set_byte(opad, i, get_byte(k, i) # 92);
        END LOOP;
      END
      $fn$`;

/**
 * Every sealed ticket's position, computed from the draws as anyone can from the published
 * records: its draw's first position plus its rank in the bucket by HMAC-SHA256(seed, ticket id),
 * ties by ticket id, both compared byte by byte. A block numbered on arrival (no seed) keeps the
 * positions its rows hold. Tickets of buckets not yet sealed have none.
 */
const QUEUE_PLACES = `
      CREATE FUNCTION queue_places(p_product integer)
      RETURNS TABLE (user_id text, ticket_id text, bucket bigint, "position" bigint)
      LANGUAGE plpgsql STABLE AS $fn$
      #variable_conflict use_column
      DECLARE
        d record;
        k record;
      BEGIN
        FOR d IN SELECT x.bucket, x.first_position, x.seed FROM queue_draws x WHERE x.product_id = p_product ORDER BY x.bucket LOOP
          IF d.seed IS NULL THEN
            RETURN QUERY SELECT t.user_id, t.ticket_id::text, t.bucket, t.position
              FROM queue_tickets t WHERE t.product_id = p_product AND t.bucket = d.bucket;
            CONTINUE;
          END IF;
          SELECT * INTO k FROM queue_hmac_pads(d.seed);
          RETURN QUERY
            SELECT t.user_id, t.ticket_id::text, t.bucket,
                   d.first_position - 1 + row_number() OVER (
                     ORDER BY sha256(k.opad || sha256(k.ipad || convert_to(t.ticket_id, 'UTF8'))), t.ticket_id)
              FROM queue_tickets t WHERE t.product_id = p_product AND t.bucket = d.bucket;
        END LOOP;
      END
      $fn$`;

/** queue_counts_for_room() as 1764450000000-PreQueueCount made it: what going back restores. */
const QUEUE_COUNTS_FOR_ROOM_BEFORE = `
      CREATE OR REPLACE FUNCTION queue_counts_for_room() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        INSERT INTO queue_counts (product_id) VALUES (NEW.product_id)
          ON CONFLICT (product_id) DO UPDATE SET pre_queue = NULL, arrivals = 0, pre_joined = 0;
        RETURN NULL;
      END
      $fn$`;

/** queue_draw() as 1764200000000-QueueInPostgres made it: what going back restores. */
const QUEUE_DRAW_BEFORE = `
      CREATE FUNCTION queue_draw(p_product integer) RETURNS integer
      LANGUAGE plpgsql AS $fn$
      DECLARE
        v_pre integer;
      BEGIN
        SELECT c.pre_queue INTO v_pre FROM queue_counts c WHERE c.product_id = p_product FOR UPDATE;
        IF v_pre IS NOT NULL OR NOT FOUND THEN RETURN v_pre; END IF;
        UPDATE queue_tickets t SET position = d.rn
          FROM (SELECT x.user_id, row_number() OVER (ORDER BY x.lottery_key, x.ticket_id) AS rn
                  FROM queue_tickets x WHERE x.product_id = p_product AND x.kind = 'p') d
         WHERE t.product_id = p_product AND t.user_id = d.user_id;
        GET DIAGNOSTICS v_pre = ROW_COUNT;
        UPDATE queue_counts c SET pre_queue = v_pre WHERE c.product_id = p_product;
        RETURN v_pre;
      END
      $fn$`;

/** queue_join() as 1764450000000-PreQueueCount made it: what going back restores. */
const QUEUE_JOIN_BEFORE = `
      CREATE OR REPLACE FUNCTION queue_join(p_product integer, p_arrival boolean, p_users text[], p_tickets text[], p_keys bytea[])
      RETURNS TABLE (user_id text, ticket_id text, kind char(1), "position" bigint, created boolean)
      LANGUAGE plpgsql AS $fn$
      #variable_conflict use_column
      DECLARE
        v_pre integer;
        v_arrivals bigint;
        v_made bigint;
      BEGIN
        SELECT c.pre_queue, c.arrivals INTO v_pre, v_arrivals
          FROM queue_counts c WHERE c.product_id = p_product FOR UPDATE;
        IF NOT FOUND THEN RETURN; END IF;
        IF v_pre IS NULL AND p_arrival THEN
          v_pre := queue_draw(p_product);
        END IF;
        WITH made AS (
          INSERT INTO queue_tickets (product_id, user_id, ticket_id, kind, lottery_key, position)
          SELECT p_product, f.u, f.t,
               CASE WHEN v_pre IS NULL THEN 'p' ELSE 'a' END,
               CASE WHEN v_pre IS NULL THEN f.k END,
               CASE WHEN v_pre IS NULL THEN NULL ELSE v_pre + v_arrivals + row_number() OVER (ORDER BY f.o) END
          FROM (SELECT DISTINCT ON (g.u) g.u, g.t, g.k, g.o
                  FROM unnest(p_users, p_tickets, p_keys) WITH ORDINALITY AS g(u, t, k, o)
                 ORDER BY g.u, g.o) f
          -- A scalar subquery, not NOT EXISTS: it stays a probe per user (never turned into a join).
         WHERE (SELECT true FROM queue_tickets x WHERE x.product_id = p_product AND x.user_id = f.u) IS NULL
         ORDER BY f.o
          RETURNING 1)
        SELECT count(*) INTO v_made FROM made;
        IF v_made > 0 THEN
          UPDATE queue_counts c
             SET arrivals = c.arrivals + CASE WHEN v_pre IS NULL THEN 0 ELSE v_made END,
                 pre_joined = c.pre_joined + CASE WHEN v_pre IS NULL THEN v_made ELSE 0 END
           WHERE c.product_id = p_product;
        END IF;
        -- Each user's ticket by a probe of its own: a LATERAL subquery with OFFSET 0 is never
        -- flattened into a join, so it runs once per user. Made now: a row this transaction wrote
        -- (its xmin), said of the first time its user appears in the group.
        RETURN QUERY
          SELECT g.u, x.ticket_id::text, x.kind, x.position,
                 x.mine AND g.o = min(g.o) OVER (PARTITION BY g.u)
            FROM unnest(p_users) WITH ORDINALITY AS g(u, o)
           CROSS JOIN LATERAL (
                 SELECT t.ticket_id, t.kind, t.position, t.xmin = pg_current_xact_id()::xid AS mine
                   FROM queue_tickets t WHERE t.product_id = p_product AND t.user_id = g.u
                 OFFSET 0) x
           ORDER BY g.o;
      END
      $fn$`;
