import { admissionStepProblems, bucketOfPosition, promiseBreaches } from '../harness/queue-order';

describe("the queue's promise, checked from outside", () => {
  // Bucket 10 holds places 1-3, bucket 11 places 4-5 (an empty draw in between is skipped).
  const bucketOf = bucketOfPosition([
    { bucket: 10, firstPosition: 1, tickets: 3 },
    { bucket: 12, firstPosition: 4, tickets: 0 },
    { bucket: 11, firstPosition: 4, tickets: 2 },
  ]);

  it('finds the bucket of each place from the published draws', () => {
    expect([1, 2, 3, 4, 5, 6].map(bucketOf)).toEqual([10, 10, 10, 11, 11, undefined]);
  });

  it('accepts a join placed before one answered earlier in its own bucket, and a later join placed behind', () => {
    const joins = [
      { sentAt: 0, answeredAt: 10, position: 3 },
      { sentAt: 20, answeredAt: 30, position: 1 }, // same bucket: the lottery may put it first
      { sentAt: 40, answeredAt: 50, position: 4 },
    ];
    expect(promiseBreaches(joins, bucketOf)).toEqual([]);
  });

  it('finds a join placed before one of another bucket that was answered before it was sent', () => {
    const early = { sentAt: 0, answeredAt: 10, position: 4 };
    const late = { sentAt: 20, answeredAt: 30, position: 2 };
    // Two joins in flight at once may be placed either way.
    const overlapping = { sentAt: 5, answeredAt: 25, position: 1 };
    expect(promiseBreaches([early, late, overlapping], bucketOf)).toEqual([{ before: early, after: late }]);
  });

  it('names each admission step out of queue order or past the ratio, and nothing when every step keeps both', () => {
    const step = (first: number, last: number, admittedAt: number, unitsLeft = 10, outstandingBefore = 0) => ({
      first,
      last,
      admittedAt,
      unitsLeft,
      outstandingBefore,
    });
    expect(admissionStepProblems([step(1, 15, 0), step(16, 18, 5, 8, 9)], 1.5)).toEqual([]);
    expect(admissionStepProblems([step(2, 10, 0)], 1.5)).toEqual(['step 1 (places 2-10) starts at 2, not 1']);
    expect(admissionStepProblems([step(1, 10, 0), step(12, 12, 5)], 1.5)).toEqual([
      'step 2 (places 12-12) starts at 12, not 11',
    ]);
    expect(admissionStepProblems([step(1, 10, 10), step(11, 12, 4)], 1.5)).toEqual([
      'step 2 (places 11-12) is dated 6 ms before the step it follows',
    ]);
    expect(admissionStepProblems([step(1, 16, 0)], 1.5)).toEqual([
      'step 1 (places 1-16): 0 outstanding + 16 > 15 for 10 units left',
    ]);
    // Without a ratio, only the order is checked.
    expect(admissionStepProblems([step(1, 16, 0)])).toEqual([]);
  });
});
