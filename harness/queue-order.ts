// The waiting room's order as anyone can check it from outside, shared by the e2e specs, the
// benchmark and the nemesis: the published draws say which bucket holds each position, and the
// promise is that a join answered before another was sent is never placed behind it, unless both
// fell in the same bucket (docs/waiting-room.md); admissions go in steps over consecutive places,
// each step made after the one before it and within the admission ratio.

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

/** An admission step as the admission_batches table records it (times in epoch ms). */
export interface AdmissionStep {
  first: number;
  last: number;
  admittedAt: number;
  /** What the step was decided on: the units left and the admissions outstanding before it. */
  unitsLeft: number;
  outstandingBefore: number;
}

/**
 * Why a step does not follow the one before it in exact queue order (the first starts at place 1,
 * each next one right after the one before, made no earlier); null when it does.
 */
export function stepOutOfOrder(
  step: Pick<AdmissionStep, 'first' | 'last' | 'admittedAt'>,
  before: Pick<AdmissionStep, 'last' | 'admittedAt'> | undefined,
): string | null {
  const next = before === undefined ? 1 : before.last + 1;
  if (step.first !== next) return `starts at ${step.first}, not ${next}`;
  if (before !== undefined && step.admittedAt < before.admittedAt)
    return `is dated ${before.admittedAt - step.admittedAt} ms before the step it follows`;
  return null;
}

/**
 * What is wrong with one product's admission steps (in place order), one line per fault: a step
 * out of queue order, or, when `ratio` is given (the service's ADMISSION_RATIO), one that took the
 * outstanding admissions past ceil(ratio x the units left it was decided on). Empty when nothing is.
 */
export function admissionStepProblems(steps: readonly AdmissionStep[], ratio?: number): string[] {
  return steps.flatMap((s, i) => {
    const name = `step ${i + 1} (places ${s.first}-${s.last})`;
    const order = stepOutOfOrder(s, steps[i - 1]);
    const size = s.last - s.first + 1;
    const budget = ratio === undefined ? Infinity : Math.ceil(ratio * s.unitsLeft);
    return [
      ...(order === null ? [] : [`${name} ${order}`]),
      ...(s.outstandingBefore + size <= budget
        ? []
        : [`${name}: ${s.outstandingBefore} outstanding + ${size} > ${budget} for ${s.unitsLeft} units left`]),
    ];
  });
}
