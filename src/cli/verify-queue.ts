// `npm run verify-queue -- URL PRODUCT_ID [TICKET] [--token T] [--json]`: checks a waiting room's order from
// its public records alone, as any buyer can. It reads the lottery's commitment
// (GET /products/:id/queue/fairness), every draw and the hash chains of the seeds
// (GET .../queue/draws) and each draw's tickets in drawn order (GET .../queue/draws/:bucket), then
// checks that the seeds are the ones committed before the sale (each hashes to the one revealed
// before it, or to a chain's head published before the draw's bucket began), that the positions
// run 1, 2, ... with no hole and none twice, and that every bucket's order is the one its seed
// draws. Given a ticket (the `id` a join answered), it also checks that ticket's place. Exit code:
// 0 when everything matches, 1 on any mismatch, 2 when the records cannot be read.
// Written from the published algorithm, apart from the service's own code: it imports nothing of it.
import { createHash, createHmac } from 'node:crypto';
import { parseArgs } from 'node:util';

const USAGE =
  'usage: npm run verify-queue -- <service URL> <productId> [ticket] [--token <buyer token>] [--json]\n' +
  "  --token: the ticket holder's bearer token, where the service asks buyers for one (the records are public)";

interface Chain {
  firstDraw: number;
  length: number;
  head: string;
  madeAt: string;
}

interface Draw {
  bucket: number;
  draw: number | null;
  firstPosition: number;
  tickets: number;
  seed: string | null;
  drawnAt: string;
}

interface Records {
  fairness: { seedHash: string; seed?: string; preQueue: number | null };
  bucketMs: number;
  chains: Chain[];
  draws: Draw[];
  /** Per drawn bucket, its lottery ids in the order the service published. */
  orders: Map<number, string[]>;
}

export interface Verdict {
  ok: boolean;
  problems: string[];
  draws: number;
  tickets: number;
  /** Every ticket's position as recomputed here, by lottery id. */
  positions: Record<string, number>;
  ticket?: { lotteryId: string; position: number | null; bucket: number | null; status: string };
  /** The room's bucket width, as read with the records. */
  bucketMs?: number;
}

const sha256 = (hex: string) => createHash('sha256').update(Buffer.from(hex, 'hex')).digest('hex');

/** A draw's order as the algorithm says: by HMAC-SHA256(seed, id) in lowercase hex, ties by id. */
export function drawnOrder(seedHex: string, ids: readonly string[]): string[] {
  const seed = Buffer.from(seedHex, 'hex');
  return ids
    .map((id) => ({ id, k: createHmac('sha256', seed).update(id, 'ascii').digest('hex') }))
    .sort((a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
    .map((t) => t.id);
}

/** Every check on the records; the verdict lists each problem found. */
export function check(r: Records): Verdict {
  const problems: string[] = [];
  const positions: Record<string, number> = {};
  const chains = [...r.chains].sort((a, b) => a.firstDraw - b.firstDraw);
  const draws = [...r.draws].sort((a, b) => a.bucket - b.bucket);
  // The chains: the first is the pre-queue's seed (committed by seedHash); each starts where the last ends.
  if (chains[0]?.firstDraw !== 0 || chains[0].head !== r.fairness.seedHash)
    problems.push("the first chain is not the pre-queue's commitment (seedHash)");
  chains.forEach((c, i) => {
    if (i > 0 && c.firstDraw !== chains[i - 1].firstDraw + chains[i - 1].length)
      problems.push(`chain ${i} starts at draw ${c.firstDraw}, not where chain ${i - 1} ends`);
  });
  const chainOf = (draw: number) => chains.find((c) => c.firstDraw <= draw && draw < c.firstDraw + c.length);
  let expectedFirst = 1;
  let expectedDraw = 0;
  let previousSeed: string | null = null;
  for (const d of draws) {
    if (d.firstPosition !== expectedFirst)
      problems.push(
        `bucket ${d.bucket} starts at position ${d.firstPosition}, not ${expectedFirst} (a hole or an overlap)`,
      );
    expectedFirst = d.firstPosition + d.tickets;
    if (d.draw === null || d.seed === null) continue; // a block numbered on arrival, before buckets
    if (d.draw !== expectedDraw) problems.push(`bucket ${d.bucket} is draw ${d.draw}, not ${expectedDraw}`);
    expectedDraw = d.draw + 1;
    const chain = chainOf(d.draw);
    if (chain === undefined) problems.push(`no chain commits draw ${d.draw}`);
    else if (d.draw === chain.firstDraw) {
      if (sha256(d.seed) !== chain.head) problems.push(`draw ${d.draw}'s seed does not hash to its chain's head`);
      // A chain after the first two is made during the sale: its head must be out before its first bucket began.
      const startsAt = d.bucket * r.bucketMs;
      if (chain.firstDraw > 1 && Date.parse(chain.madeAt) > startsAt)
        problems.push(`the chain of draw ${d.draw} was published after its bucket began`);
    } else if (previousSeed === null || sha256(d.seed) !== previousSeed)
      problems.push(`draw ${d.draw}'s seed does not hash to the seed of draw ${d.draw - 1}`);
    previousSeed = d.seed;
    if (d.bucket > 1 && Date.parse(d.drawnAt) < (d.bucket + 1) * r.bucketMs)
      problems.push(`bucket ${d.bucket} was drawn before it ended`);
    if (d.bucket === 0 && r.fairness.seed !== undefined && r.fairness.seed !== d.seed)
      problems.push("the pre-queue's draw has another seed than the one the fairness record reveals");
    if (d.tickets === 0) continue;
    const published = r.orders.get(d.bucket) ?? [];
    if (published.length !== d.tickets)
      problems.push(`bucket ${d.bucket} lists ${published.length} tickets, its draw says ${d.tickets}`);
    const recomputed = drawnOrder(d.seed, published);
    recomputed.forEach((id, i) => {
      if (positions[id] !== undefined) problems.push(`ticket ${id} is in two buckets`);
      positions[id] = d.firstPosition + i;
    });
    const moved = published.filter((id, i) => recomputed[i] !== id).length;
    if (moved > 0)
      problems.push(`bucket ${d.bucket}: ${moved} of ${d.tickets} tickets are not where its seed draws them`);
  }
  return {
    ok: problems.length === 0,
    problems,
    draws: draws.length,
    tickets: Object.keys(positions).length,
    positions,
  };
}

/** A record as JSON, or an error naming what answered instead. */
async function getJson<T>(url: string, what: string, token?: string): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  const res = await fetch(url, { headers });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`GET ${what} answered ${res.status}: ${text.slice(0, 200)}`);
  return JSON.parse(text) as T;
}

const queueOf = (base: string, productId: string) => `${base.replace(/\/+$/, '')}/products/${productId}/queue`;

async function records(base: string, productId: string): Promise<Records> {
  const root = queueOf(base, productId);
  const fairness = await getJson<Records['fairness']>(`${root}/fairness`, 'fairness');
  const all = await getJson<{ bucketMs: number; chains: Chain[]; draws: Draw[] }>(`${root}/draws`, 'draws');
  const orders = new Map<number, string[]>();
  for (const d of all.draws) {
    if (d.seed === null || d.tickets === 0) continue;
    const one = await getJson<{ lotteryIds: string[] }>(`${root}/draws/${d.bucket}`, `draws/${d.bucket}`);
    orders.set(d.bucket, one.lotteryIds);
  }
  return { fairness, bucketMs: all.bucketMs, chains: all.chains, draws: all.draws, orders };
}

/** Reads the records (and the ticket, when given) and checks them. */
export async function verify(base: string, productId: string, ticket?: string, token?: string): Promise<Verdict> {
  const r = await records(base, productId);
  const verdict: Verdict = { ...check(r), bucketMs: r.bucketMs };
  if (ticket === undefined) return verdict;
  const { lotteryId, position, status } = await getJson<{ lotteryId: string; position: number | null; status: string }>(
    `${queueOf(base, productId)}/${ticket}`,
    'the ticket',
    token,
  );
  const recomputed = verdict.positions[lotteryId];
  const bucket = r.draws.find(
    (d) => position !== null && d.firstPosition <= position && position < d.firstPosition + d.tickets,
  );
  verdict.ticket = { lotteryId, position, bucket: bucket?.bucket ?? null, status };
  if (position !== null && recomputed !== position)
    verdict.problems.push(
      `your ticket is told position ${position}; its draw puts it at ${recomputed ?? 'no position'}`,
    );
  verdict.ok = verdict.problems.length === 0;
  return verdict;
}

/** What a buyer reads: their ticket's place and bucket, every mismatch, and the verdict. */
function report(v: Verdict): string {
  const lines = [`${v.draws} draws, ${v.tickets} tickets placed`];
  if (v.ticket) {
    const { position, bucket } = v.ticket;
    if (position === null) lines.push(`your ticket ${v.ticket.lotteryId}: not placed yet (its bucket is being drawn)`);
    else {
      const when =
        bucket === 0
          ? 'the pre-queue'
          : bucket !== null && v.bucketMs !== undefined
            ? `the bucket of ${new Date(bucket * v.bucketMs).toISOString()} to ${new Date((bucket + 1) * v.bucketMs).toISOString()}`
            : 'a block numbered on arrival';
      lines.push(
        `your ticket ${v.ticket.lotteryId}: position ${position}, in ${when}: ${v.ok ? 'as drawn' : 'MISMATCH'}`,
      );
    }
  }
  lines.push(...v.problems.map((p) => `MISMATCH: ${p}`));
  lines.push(v.ok ? 'OK: every draw is the one its committed seed makes' : `${v.problems.length} mismatches`);
  return `${lines.join('\n')}\n`;
}

async function main(): Promise<void> {
  let parsed: { values: { json?: boolean; help?: boolean; token?: string }; positionals: string[] };
  try {
    parsed = parseArgs({
      options: { json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' }, token: { type: 'string' } },
      allowPositionals: true,
    });
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${USAGE}\n`);
    process.exitCode = 2;
    return;
  }
  const [base, productId, ticket] = parsed.positionals;
  if (parsed.values.help) return void process.stdout.write(`${USAGE}\n`);
  if (base === undefined || productId === undefined || !/^[1-9][0-9]*$/.test(productId)) {
    process.stderr.write(`${USAGE}\n`);
    process.exitCode = 2;
    return;
  }
  let verdict: Verdict;
  try {
    verdict = await verify(base, productId, ticket, parsed.values.token);
  } catch (err) {
    process.stderr.write(`cannot read the records: ${(err as Error).message}\n`);
    process.exitCode = 2;
    return;
  }
  process.stdout.write(parsed.values.json ? `${JSON.stringify(verdict)}\n` : report(verdict));
  process.exitCode = verdict.ok ? 0 : 1;
}

if (require.main === module) void main();
