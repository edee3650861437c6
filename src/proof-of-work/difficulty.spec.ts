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

  it('eases one step at a time, each after easeS seconds below it', () => {
    const d = new AdaptiveDifficulty(settings);
    burst(d, 900, T);
    expect(d.current(1, T).step).toBe(3);
    expect(d.current(1, T + 5_000).step).toBe(3);
    expect(d.current(1, T + 10_000).step).toBe(2);
    expect(d.current(1, T + 15_000).step).toBe(2);
    expect(d.current(1, T + 20_000).step).toBe(1);
    expect(d.current(1, T + 30_000).step).toBe(0);
    expect(d.current(1, T + 90_000).step).toBe(0);
  });

  it('rises again at once when the crowd comes back while it eases', () => {
    const d = new AdaptiveDifficulty(settings);
    burst(d, 900, T);
    expect(d.current(1, T + 10_000).step).toBe(2);
    burst(d, 900, T + 12_000);
    expect(d.current(1, T + 12_000).step).toBe(3);
  });
});
