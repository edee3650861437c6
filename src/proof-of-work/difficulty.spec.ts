import { AdaptiveDifficulty, stepFor } from './difficulty';

const settings = { steps: [1000, 2000, 4000, 8000], joinsPerS: 100, easeS: 10 };

describe('stepFor', () => {
  it('keeps the first step up to the level, then adds one per doubling, up to the last', () => {
    expect([0, 100, 101, 199, 200, 399, 400, 800, 100_000].map((r) => stepFor(r, settings))).toEqual([
      0, 0, 1, 1, 2, 2, 3, 3, 3,
    ]);
  });
});

describe('AdaptiveDifficulty', () => {
  const T = 1_000_000_000_000;
  const burst = (d: AdaptiveDifficulty, n: number, at: number) => {
    for (let i = 0; i < n; i++) d.count(1, at);
  };
  /** The steps in force at T + each of `after` (ms), read in that order. */
  const stepsAt = (d: AdaptiveDifficulty, after: number[]) => after.map((ms) => d.current(1, T + ms).step);

  it('is at rest for a product it has not seen, and its floor is the first step', () => {
    const d = new AdaptiveDifficulty(settings);
    expect(d.current(1, T)).toEqual({ step: 0, maxNumber: 1000 });
    expect(d.floor(1, T)).toBe(1000);
  });

  it('rises with the joins of the current or the last whole second, for that product only', () => {
    const d = new AdaptiveDifficulty(settings);
    burst(d, 250, T);
    expect(d.current(1, T + 10)).toEqual({ step: 2, maxNumber: 4000 });
    // The next second still sees the last one's rate.
    expect(d.current(1, T + 1000).step).toBe(2);
    expect(d.current(2, T + 1000).step).toBe(0);
    // A floor one step below the one in force: a step that rose while a buyer solved costs them nothing.
    expect(d.floor(1, T + 1000)).toBe(2000);
  });

  it('eases one step at a time, each after easeS seconds below it, from when the rate fell below it', () => {
    const d = new AdaptiveDifficulty(settings);
    burst(d, 900, T);
    // The burst's second is the last whole second until T + 2 s: the rate falls below the step then.
    expect(stepsAt(d, [0, 1_999, 11_999, 12_000, 21_999, 22_000, 32_000, 90_000])).toEqual([3, 3, 3, 2, 2, 1, 0, 0]);
  });

  it('eases by the time that passed, however few calls came', () => {
    // Asked only once after the burst: every ease that fell due meanwhile has been made.
    const asked = (at: number) => {
      const d = new AdaptiveDifficulty(settings);
      burst(d, 900, T);
      return d.current(1, T + at).step;
    };
    expect(asked(22_000)).toBe(1);
    expect(asked(32_000)).toBe(0);
    expect(asked(300_000)).toBe(0);
    // Asked a few times, as a quiet product is: the answers are those of a product asked every second.
    const d = new AdaptiveDifficulty(settings);
    burst(d, 900, T);
    expect(stepsAt(d, [13_500, 13_600, 31_000, 33_000])).toEqual([2, 2, 1, 0]);
    // A join is counted on a product left alone since: it finds the step the time says, not the one last asked.
    const e = new AdaptiveDifficulty(settings);
    burst(e, 900, T);
    e.count(1, T + 60_000);
    expect(e.current(1, T + 60_000).step).toBe(0);
  });

  it('counts the first ease after a long surge from when the surge ended, not from the rise', () => {
    const d = new AdaptiveDifficulty(settings);
    for (let s = 0; s < 60; s++) burst(d, 900, T + s * 1000);
    // The surge's last second counts until T + 61 s; the first ease comes easeS (10 s) after that.
    expect(stepsAt(d, [59_500, 62_000, 70_999, 71_000, 81_000])).toEqual([3, 3, 3, 2, 1]);
  });

  it('waits easeS below each level: a rate that falls in two stages eases from each stage', () => {
    const d = new AdaptiveDifficulty(settings);
    burst(d, 900, T);
    // From T + 2 s the rate is 0, except 250 joins at T + 5 s (step 2's level, through T + 7 s).
    burst(d, 250, T + 5_000);
    // Below step 2 only from T + 7 s; step 2 was reached at T + 12 s, and lasts easeS from then.
    expect(stepsAt(d, [11_999, 12_000, 21_999, 22_000])).toEqual([3, 2, 2, 1]);
  });

  it('rises again at once when the crowd comes back while it eases', () => {
    const d = new AdaptiveDifficulty(settings);
    burst(d, 900, T);
    expect(d.current(1, T + 12_000).step).toBe(2);
    burst(d, 900, T + 14_000);
    // And eases again from when that crowd left.
    expect(stepsAt(d, [14_000, 25_999, 26_000])).toEqual([3, 3, 2]);
  });
});
