// Pure arithmetic of segments: how stock is split, and in which order an order visits segments.

/** Splits `total` units into `n` segments whose sizes differ by at most one (larger ones first). */
export function evenSplit(total: number, n: number): number[] {
  if (!Number.isInteger(total) || total < 0) throw new RangeError(`total must be a non-negative integer, got ${total}`);
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`segment count must be a positive integer, got ${n}`);
  const base = Math.floor(total / n);
  const extra = total % n;
  return Array.from({ length: n }, (_, i) => base + (i < extra ? 1 : 0));
}

/**
 * How many of `units` new units each segment gets so that the sizes end as even as possible: the
 * smallest segments are filled up first (to a common level), and what does not divide evenly goes
 * one each to the lowest indexes at that level. Returns one addition per segment, in index order.
 */
export function fillEvenly(stocks: number[], units: number): number[] {
  if (!Number.isInteger(units) || units < 0) throw new RangeError(`units must be a non-negative integer, got ${units}`);
  if (stocks.length === 0) throw new RangeError('there must be at least one segment');
  const order = stocks.map((stock, idx) => ({ stock, idx })).sort((a, b) => a.stock - b.stock || a.idx - b.idx);
  // Raise the k smallest to the level of the next one while the units last.
  let k = 1;
  let left = units;
  let level = order[0].stock;
  while (k < order.length && left >= (order[k].stock - level) * k) {
    left -= (order[k].stock - level) * k;
    level = order[k].stock;
    k++;
  }
  level += Math.floor(left / k);
  const extra = left % k;
  const adds = new Array<number>(stocks.length).fill(0);
  const raised = order.slice(0, k).sort((a, b) => a.idx - b.idx);
  raised.forEach((s, i) => {
    adds[s.idx] = level - s.stock + (i < extra ? 1 : 0);
  });
  return adds;
}

/**
 * The segments an order tries, in order: every index of `count` from `start`, wrapping around,
 * leaving out those in `skip` (known empty). Random start spreads buyers; the wrap is the fallover.
 */
export function visitOrder(count: number, start: number, skip: ReadonlySet<number> = new Set()): number[] {
  const order: number[] = [];
  for (let k = 0; k < count; k++) {
    const idx = (start + k) % count;
    if (!skip.has(idx)) order.push(idx);
  }
  return order;
}

/** A uniformly random start segment. */
export function randomStart(count: number, random: () => number = Math.random): number {
  return Math.min(count - 1, Math.floor(random() * count));
}

/**
 * Picks segments to fill `quantity` when no single one can: the fullest first (fewest locks),
 * returned in ascending index order (the order locks are taken in, so two multi-segment orders
 * and a rebalance never wait on each other in a cycle). Null when the segments hold too few.
 */
export function pickSegmentsFor(
  quantity: number,
  segments: ReadonlyArray<{ idx: number; stock: number }>,
): number[] | null {
  const byStock = segments.filter((s) => s.stock > 0).sort((a, b) => b.stock - a.stock || a.idx - b.idx);
  const picked: number[] = [];
  let sum = 0;
  for (const s of byStock) {
    if (sum >= quantity) break;
    picked.push(s.idx);
    sum += s.stock;
  }
  return sum >= quantity ? picked.sort((a, b) => a - b) : null;
}

/** How much to take from each locked segment (ascending), given their current stock. */
export function takeFrom(
  quantity: number,
  segments: ReadonlyArray<{ idx: number; stock: number }>,
): Array<{ segment: number; quantity: number }> | null {
  const takes: Array<{ segment: number; quantity: number }> = [];
  let left = quantity;
  for (const s of [...segments].sort((a, b) => a.idx - b.idx)) {
    if (left === 0) break;
    const q = Math.min(left, s.stock);
    if (q > 0) takes.push({ segment: s.idx, quantity: q });
    left -= q;
  }
  return left === 0 ? takes : null;
}
