import { createHash, randomBytes } from 'node:crypto';
import { check, drawnOrder } from './verify-queue';

const hash = (b: Buffer) => createHash('sha256').update(b).digest();
const ids = (prefix: string, n: number) =>
  Array.from({ length: n }, (_, i) => createHash('sha256').update(`${prefix}${i}`).digest('hex').slice(0, 24));

/** Records as a room publishes them: the pre-queue (its own seed), then three buckets drawn from one chain. */
function records() {
  const preSeed = randomBytes(32);
  // A chain of 4 from a root: draw 1 uses element 3, draw 2 element 2, draw 3 element 1.
  const chain = [randomBytes(32)];
  for (let i = 1; i <= 4; i++) chain.push(hash(chain[i - 1]));
  const bucketMs = 100;
  const bucket0 = 17_000_000_000;
  const tickets = [ids('p', 5), ids('a', 3), ids('b', 4), ids('c', 2)];
  const seeds = [preSeed, chain[3], chain[2], chain[1]];
  let first = 1;
  const draws = tickets.map((t, k) => {
    const bucket = k === 0 ? 0 : bucket0 + k;
    const d = {
      bucket,
      draw: k,
      firstPosition: first,
      tickets: t.length,
      seed: seeds[k].toString('hex'),
      drawnAt: new Date((bucket + 1) * bucketMs + 20).toISOString(),
    };
    first += t.length;
    return d;
  });
  return {
    fairness: { seedHash: hash(preSeed).toString('hex'), seed: preSeed.toString('hex'), preQueue: 5 },
    bucketMs,
    chains: [
      { firstDraw: 0, length: 1, head: hash(preSeed).toString('hex'), madeAt: new Date(0).toISOString() },
      { firstDraw: 1, length: 4, head: chain[4].toString('hex'), madeAt: new Date(0).toISOString() },
    ],
    draws,
    orders: new Map(draws.map((d, k) => [d.bucket, drawnOrder(d.seed, tickets[k])])),
  };
}

describe('the queue verifier', () => {
  it('accepts records whose seeds follow their chains and whose buckets are in their drawn order, and places every ticket', () => {
    const r = records();
    const verdict = check(r);
    expect(verdict.problems).toEqual([]);
    expect(verdict.ok).toBe(true);
    expect(verdict.tickets).toBe(14);
    expect(Object.values(verdict.positions).sort((x, y) => x - y)).toEqual(Array.from({ length: 14 }, (_, i) => i + 1));
    const [firstOfBucket2] = r.orders.get(r.draws[2].bucket) as string[];
    expect(verdict.positions[firstOfBucket2]).toBe(9);
  });

  it('finds two tickets of a bucket swapped', () => {
    const r = records();
    const order = r.orders.get(r.draws[1].bucket) as string[];
    [order[0], order[1]] = [order[1], order[0]];
    expect(check(r).problems).toEqual([expect.stringMatching(/2 of 3 tickets are not where its seed draws them/)]);
  });

  it('finds a seed that is not the next of its chain, and one the head does not commit', () => {
    const r = records();
    r.draws[2].seed = randomBytes(32).toString('hex');
    r.orders.set(r.draws[2].bucket, drawnOrder(r.draws[2].seed, r.orders.get(r.draws[2].bucket) as string[]));
    const problems = check(r).problems;
    expect(problems).toContainEqual(expect.stringMatching(/draw 2's seed does not hash to the seed of draw 1/));
    expect(problems).toContainEqual(expect.stringMatching(/draw 3's seed does not hash to the seed of draw 2/));
    const s = records();
    s.chains[1].head = randomBytes(32).toString('hex');
    expect(check(s).problems).toEqual([expect.stringMatching(/draw 1's seed does not hash to its chain's head/)]);
  });

  it('finds a hole or an overlap in the positions, and a ticket in two buckets', () => {
    const r = records();
    r.draws[2].firstPosition += 1;
    expect(check(r).problems).toContainEqual(expect.stringMatching(/starts at position 10, not 9/));
    const s = records();
    const twice = (s.orders.get(s.draws[1].bucket) as string[])[0];
    const other = s.orders.get(s.draws[3].bucket) as string[];
    other[0] = twice;
    s.orders.set(s.draws[3].bucket, drawnOrder(s.draws[3].seed, other));
    expect(check(s).problems).toContainEqual(expect.stringMatching(/is in two buckets/));
  });

  it('finds a chain published after the bucket it first draws began, and a bucket drawn before it ended', () => {
    const r = records();
    // A third chain, made during the sale, whose head came out after its first bucket began.
    const root = randomBytes(32);
    r.chains.push({ firstDraw: 5, length: 1, head: hash(root).toString('hex'), madeAt: new Date().toISOString() });
    r.draws.push({
      bucket: 17_000_000_010,
      draw: 4,
      firstPosition: 15,
      tickets: 0,
      seed: randomBytes(32).toString('hex'),
      drawnAt: new Date(17_000_000_011 * 100).toISOString(),
    });
    r.draws.push({
      bucket: 17_000_000_011,
      draw: 5,
      firstPosition: 15,
      tickets: 0,
      seed: root.toString('hex'),
      drawnAt: new Date(17_000_000_012 * 100).toISOString(),
    });
    expect(check(r).problems).toContainEqual(
      expect.stringMatching(/the chain of draw 5 was published after its bucket began/),
    );
    const s = records();
    s.draws[1].drawnAt = new Date(s.draws[1].bucket * 100 + 50).toISOString();
    expect(check(s).problems).toEqual([expect.stringMatching(/was drawn before it ended/)]);
  });
});
