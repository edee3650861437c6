import { bucketOfPosition, promiseBreaches } from '../harness/queue-order';

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
});
