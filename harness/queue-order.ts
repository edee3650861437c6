// The waiting room's order as anyone can check it from outside, shared by the e2e specs and the
// benchmark: the published draws say which bucket holds each position, and the promise is that a
// join answered before another was sent is never placed behind it, unless both fell in the same
// bucket (docs/waiting-room.md).

export interface TimedJoin {
  /** When the join was sent and when its answer came (epoch ms, the caller's clock). */
  sentAt: number;
  answeredAt: number;
  position: number;
}

/** A draw as GET /products/:id/queue/draws lists it. */
export interface PublishedDraw {
  bucket: number;
  firstPosition: number;
  tickets: number;
}

/** The bucket of each position, from the draws' first positions and sizes. */
export function bucketOfPosition(draws: readonly PublishedDraw[]): (position: number) => number | undefined {
  const drawn = draws.filter((d) => d.tickets > 0).sort((a, b) => a.firstPosition - b.firstPosition);
  return (position) => {
    let lo = 0;
    let hi = drawn.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const d = drawn[mid];
      if (position < d.firstPosition) hi = mid - 1;
      else if (position >= d.firstPosition + d.tickets) lo = mid + 1;
      else return d.bucket;
    }
    return undefined;
  };
}

/**
 * The joins placed against the promise: each `after` is placed before a join of another bucket
 * that was answered before it was sent (`before`, the furthest back such join). One sweep in order
 * of sending, keeping for each bucket the furthest-back place among the joins answered so far.
 */
export function promiseBreaches(
  joins: readonly TimedJoin[],
  bucketOf: (position: number) => number | undefined,
): Array<{ before: TimedJoin; after: TimedJoin }> {
  const bySent = [...joins].sort((a, b) => a.sentAt - b.sentAt);
  const byAnswer = [...joins].sort((a, b) => a.answeredAt - b.answeredAt);
  const found: Array<{ before: TimedJoin; after: TimedJoin }> = [];
  const furthest = new Map<number | undefined, TimedJoin>();
  let answered = 0;
  for (const y of bySent) {
    while (answered < byAnswer.length && byAnswer[answered].answeredAt < y.sentAt) {
      const x = byAnswer[answered++];
      const b = bucketOf(x.position);
      const held = furthest.get(b);
      if (held === undefined || x.position > held.position) furthest.set(b, x);
    }
    const mine = bucketOf(y.position);
    let worst: TimedJoin | undefined;
    for (const [b, x] of furthest)
      if (b !== mine && x.position > y.position && (worst === undefined || x.position > worst.position)) worst = x;
    if (worst !== undefined) found.push({ before: worst, after: y });
  }
  return found;
}
