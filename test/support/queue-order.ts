// The queue's order as a buyer can check it from outside: the published draws say which bucket
// holds each position, and the promise is that a join answered before another was sent is never
// placed behind it, unless both fell in the same bucket. For the specs that hammer the queue.
import { request } from './service';

export interface TimedJoin {
  /** When the join was sent and when its answer came (epoch ms, this process's clock). */
  sentAt: number;
  answeredAt: number;
  position: number;
}

/** The bucket of each position, from GET /products/:id/queue/draws (first positions and sizes). */
export async function bucketOfPosition(
  url: string,
  productId: number,
): Promise<(position: number) => number | undefined> {
  const r = await request(url, 'GET', `/products/${productId}/queue/draws`);
  if (r.status !== 200) throw new Error(`draws: ${r.status} ${r.text}`);
  const draws = (r.body.draws as Array<{ bucket: number; firstPosition: number; tickets: number }>).filter(
    (d) => d.tickets > 0,
  );
  return (position) => {
    let lo = 0;
    let hi = draws.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const d = draws[mid];
      if (position < d.firstPosition) hi = mid - 1;
      else if (position >= d.firstPosition + d.tickets) lo = mid + 1;
      else return d.bucket;
    }
    return undefined;
  };
}

/**
 * The pairs that break the promise: x answered before y was sent, yet y placed before x, in
 * different buckets. One sweep in order of sending, keeping the joins answered so far.
 */
export function orderViolations(
  joins: readonly TimedJoin[],
  bucketOf: (position: number) => number | undefined,
): Array<{ before: TimedJoin; after: TimedJoin }> {
  const bySent = [...joins].sort((a, b) => a.sentAt - b.sentAt);
  const byAnswer = [...joins].sort((a, b) => a.answeredAt - b.answeredAt);
  const found: Array<{ before: TimedJoin; after: TimedJoin }> = [];
  let answered = 0;
  // The answered joins so far, grouped by bucket: the latest place of each bucket is what counts.
  const latest = new Map<number | undefined, TimedJoin>();
  for (const y of bySent) {
    while (answered < byAnswer.length && byAnswer[answered].answeredAt < y.sentAt) {
      const x = byAnswer[answered++];
      const b = bucketOf(x.position);
      const held = latest.get(b);
      if (held === undefined || x.position > held.position) latest.set(b, x);
    }
    const mine = bucketOf(y.position);
    for (const [b, x] of latest) if (b !== mine && x.position > y.position) found.push({ before: x, after: y });
  }
  return found;
}
