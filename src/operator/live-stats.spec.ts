import { deltas, quantileMs, SecondRecord, summarise } from './live-stats';

describe('the operator page arithmetic', () => {
  it('keeps only the counters that grew since the last flush', () => {
    expect(deltas({ 'o:created': 5, rl: 2 }, { 'o:created': 9, rl: 2, 'fo:busy': 1 })).toEqual({
      'o:created': 4,
      'fo:busy': 1,
    });
  });

  it('interpolates percentiles inside the bucket, as Prometheus does', () => {
    // 100 observations: 50 at or below 10 ms, 90 at or below 25 ms, all at or below 50 ms.
    const buckets = { '0.01': 50, '0.025': 90, '0.05': 100, '+Inf': 100 };
    expect(quantileMs(buckets, 0.5)).toBeCloseTo(10);
    expect(quantileMs(buckets, 0.7)).toBeCloseTo(17.5);
    expect(quantileMs(buckets, 0.99)).toBeCloseTo(47.5);
    expect(quantileMs({ '0.01': 0, '+Inf': 0 }, 0.5)).toBeNull();
  });

  it('adds up the processes of each second into series, rates over the window, and counts the processes', () => {
    const records: SecondRecord[] = [
      { at: 100, fields: { 'o:created': 10, 'o:SOLD_OUT': 3, 'p:a': 1 } },
      { at: 101, fields: { 'o:created': 20, 'o:BUSY': 1, rl: 4, 'lw:n': 2, 'lw:ms': 30, 'p:a': 1, 'p:b': 1 } },
      { at: 103, fields: { 'fo:empty': 2, 'fo:busy': 1, 'dep:redis': 1, 'p:b': 1 } },
    ];
    const s = summarise(records, 100, 103, 3);
    expect(s.series).toEqual({
      at: [100, 101, 102, 103],
      created: [10, 20, 0, 0],
      refused: [3, 0, 0, 0],
      rateLimited: [0, 4, 0, 0],
      errors: [0, 1, 0, 0],
      lockWaits: [0, 2, 0, 0],
      fallovers: [0, 0, 0, 3],
      shed: [0, 0, 0, 0],
      eventLoopDelayMs: [null, null, null, null],
    });
    // The window is the last 3 seconds: 101..103.
    expect(s).toMatchObject({
      ordersPerS: 20 / 3,
      refusalsPerS: 0,
      lockWaitMeanMs: 15,
      byCode: { created: 20, BUSY: 1 },
      fallovers: { empty: 2, busy: 1 },
      dependencyErrors: { redis: 1 },
      processes: 2,
    });
  });

  it("adds up the calls shed, by class, and keeps the slowest process's event-loop delay of each second", () => {
    const records: SecondRecord[] = [
      { at: 100, fields: { 'sh:join': 40, 'lag:a': 400, 'lag:b': 90, 'p:a': 1, 'p:b': 1 } },
      { at: 101, fields: { 'sh:join': 10, 'sh:order': 5, 'lag:a': 180, 'p:a': 1 } },
      { at: 102, fields: { 'lag:a': 20, 'lag:b': 35, 'p:a': 1, 'p:b': 1 } },
    ];
    const s = summarise(records, 100, 102, 2);
    expect(s.series.shed).toEqual([40, 15, 0]);
    expect(s.series.eventLoopDelayMs).toEqual([400, 180, 35]);
    expect(s).toMatchObject({ shedPerS: 15 / 2, shedByClass: { join: 10, order: 5 }, eventLoopDelayMs: 180 });
    expect(s.byCode).toEqual({});
  });
});
