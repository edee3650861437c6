// The arithmetic of segments: splits, visit order, random start, multi-segment picks and takes.
import { evenSplit, pickSegmentsFor, randomStart, takeFrom, visitOrder, fillEvenly } from './segment-plan';

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
const segs = (...stocks: number[]) => stocks.map((stock, idx) => ({ idx, stock }));

describe('evenSplit', () => {
  it.each([
    [0, 1],
    [0, 5],
    [1, 1],
    [3, 5],
    [10, 3],
    [10, 4],
    [1000, 20],
    [1001, 20],
    [999, 1024],
    [1_000_000_000, 1024],
    [1_000_000_000, 7],
  ])('should split %i units over %i segments keeping every unit, sizes within one of each other', (total, n) => {
    const sizes = evenSplit(total, n);
    expect(sizes).toHaveLength(n);
    expect(sum(sizes)).toBe(total);
    expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(1);
    expect(sizes.every((s) => Number.isInteger(s) && s >= 0)).toBe(true);
  });

  it('should put the larger segments first', () => {
    expect(evenSplit(10, 4)).toEqual([3, 3, 2, 2]);
    expect(evenSplit(7, 7)).toEqual([1, 1, 1, 1, 1, 1, 1]);
    expect(evenSplit(2, 5)).toEqual([1, 1, 0, 0, 0]);
  });

  it.each([
    ['a negative total', -1, 2],
    ['a fractional total', 1.5, 2],
    ['a NaN total', NaN, 2],
    ['an infinite total', Infinity, 2],
    ['zero segments', 10, 0],
    ['negative segments', 10, -3],
    ['a fractional segment count', 10, 2.5],
    ['a NaN segment count', 10, NaN],
  ])('should throw a RangeError for %s', (_name, total, n) => {
    expect(() => evenSplit(total, n)).toThrow(RangeError);
  });
});

describe('visitOrder', () => {
  it('should visit every segment once, from the start, wrapping around', () => {
    expect(visitOrder(5, 3)).toEqual([3, 4, 0, 1, 2]);
    expect(visitOrder(5, 0)).toEqual([0, 1, 2, 3, 4]);
    expect(visitOrder(5, 4)).toEqual([4, 0, 1, 2, 3]);
    expect(visitOrder(1, 0)).toEqual([0]);
  });

  it('should leave out the segments known to be empty and keep the order of the rest', () => {
    expect(visitOrder(5, 3, new Set([4, 0]))).toEqual([3, 1, 2]);
    expect(visitOrder(5, 3, new Set([3]))).toEqual([4, 0, 1, 2]);
  });

  it('should visit nothing when every segment is known empty', () => {
    expect(visitOrder(3, 1, new Set([0, 1, 2]))).toEqual([]);
  });

  it('should ignore skipped indexes outside the layout', () => {
    expect(visitOrder(3, 2, new Set([7, -1]))).toEqual([2, 0, 1]);
  });
});

describe('randomStart', () => {
  it.each([
    [0, 10, 0],
    [0.0999, 10, 0],
    [0.1, 10, 1],
    [0.5, 10, 5],
    [0.999999, 10, 9],
    [0.999999, 1, 0],
  ])('should map random %d over %i segments to segment %i', (r, count, expected) => {
    expect(randomStart(count, () => r)).toBe(expected);
  });

  it('should stay below the segment count even if the random source returns 1', () => {
    expect(randomStart(8, () => 1)).toBe(7);
  });

  it('should use Math.random by default and stay within bounds', () => {
    const spy = jest.spyOn(Math, 'random').mockReturnValue(0.42);
    try {
      expect(randomStart(100)).toBe(42);
      expect(spy).toHaveBeenCalledTimes(1);
    } finally {
      spy.mockRestore();
    }
    for (let i = 0; i < 200; i++) {
      const s = randomStart(7);
      expect(Number.isInteger(s) && s >= 0 && s < 7).toBe(true);
    }
  });
});

describe('pickSegmentsFor', () => {
  it('should pick the fullest segments first and return them in ascending index order', () => {
    // fullest: idx 3 (9), then idx 1 (5): 14 >= 12, two locks instead of three
    expect(pickSegmentsFor(12, segs(4, 5, 3, 9))).toEqual([1, 3]);
  });

  it('should prefer the lower index among equally full segments', () => {
    expect(pickSegmentsFor(3, segs(1, 1, 1, 1))).toEqual([0, 1, 2]);
    expect(pickSegmentsFor(4, segs(2, 0, 2, 2))).toEqual([0, 2]);
  });

  it('should stop as soon as the quantity is covered', () => {
    expect(pickSegmentsFor(5, segs(5, 5, 5))).toEqual([0]);
    expect(pickSegmentsFor(6, segs(5, 5, 5))).toEqual([0, 1]);
  });

  it('should never pick an empty segment', () => {
    const picked = pickSegmentsFor(3, segs(0, 2, 0, 1, 0));
    expect(picked).toEqual([1, 3]);
  });

  it('should use every segment with stock when only all of them together hold the quantity', () => {
    expect(pickSegmentsFor(6, segs(1, 2, 3))).toEqual([0, 1, 2]);
  });

  it('should sort indexes numerically, not as strings', () => {
    const many = Array.from({ length: 12 }, (_, idx) => ({ idx, stock: idx === 2 || idx === 10 ? 5 : 1 }));
    expect(pickSegmentsFor(10, many)).toEqual([2, 10]);
  });

  it('should answer null when the segments hold too few units between them', () => {
    expect(pickSegmentsFor(7, segs(1, 2, 3))).toBeNull();
    expect(pickSegmentsFor(1, segs(0, 0))).toBeNull();
    expect(pickSegmentsFor(1, [])).toBeNull();
  });

  it('should not change the segments it was given', () => {
    const given = segs(1, 3, 2);
    const copy = given.map((s) => ({ ...s }));
    pickSegmentsFor(4, given);
    expect(given).toEqual(copy);
  });
});

describe('takeFrom', () => {
  it('should take from the segments in ascending index order until the quantity is covered', () => {
    expect(
      takeFrom(5, [
        { idx: 2, stock: 3 },
        { idx: 0, stock: 4 },
      ]),
    ).toEqual([
      { segment: 0, quantity: 4 },
      { segment: 2, quantity: 1 },
    ]);
  });

  it('should take nothing from a segment that is not needed', () => {
    expect(takeFrom(2, segs(5, 5))).toEqual([{ segment: 0, quantity: 2 }]);
  });

  it('should skip empty segments instead of taking zero from them', () => {
    expect(takeFrom(3, segs(0, 2, 0, 4))).toEqual([
      { segment: 1, quantity: 2 },
      { segment: 3, quantity: 1 },
    ]);
  });

  it('should take exactly the quantity, never more than a segment holds', () => {
    const stocks = segs(3, 1, 4, 1, 5);
    const takes = takeFrom(13, stocks);
    expect(takes).not.toBeNull();
    expect(sum(takes!.map((t) => t.quantity))).toBe(13);
    for (const t of takes!) expect(t.quantity).toBeLessThanOrEqual(stocks[t.segment].stock);
  });

  it('should answer null when the segments no longer hold the quantity', () => {
    expect(takeFrom(5, segs(2, 2))).toBeNull();
    expect(takeFrom(1, [])).toBeNull();
  });
});

describe('fillEvenly', () => {
  const cases: Array<[number[], number]> = [
    [[0, 0, 0], 7],
    [[5, 0, 2], 4],
    [[5, 0, 2], 3],
    [[10, 10], 1],
    [[3, 9, 1, 1], 100],
    [[50], 5],
    [[4, 4, 4], 0],
    [[100, 0, 0, 0], 6],
  ];
  it.each(cases)(
    'should add to %p the %i units so that every unit is placed and the smallest end as even as possible',
    (stocks, units) => {
      const adds = fillEvenly(stocks, units);
      expect(adds.reduce((a, b) => a + b, 0)).toBe(units);
      expect(adds.every((a) => Number.isInteger(a) && a >= 0)).toBe(true);
      const after = stocks.map((s, i) => s + adds[i]);
      // Every segment that received units ends at most one above the smallest segment afterwards.
      const min = Math.min(...after);
      after.forEach((size, i) => {
        if (adds[i] > 0) expect(size - min).toBeLessThanOrEqual(1);
      });
    },
  );

  it('should fill the emptiest segments first and leave a segment above the level alone', () => {
    expect(fillEvenly([5, 0, 2], 4)).toEqual([0, 3, 1]);
    expect(fillEvenly([100, 0, 0, 0], 6)).toEqual([0, 2, 2, 2]);
  });

  it('should give the remainder to the lowest indexes at the level', () => {
    expect(fillEvenly([0, 0, 0], 7)).toEqual([3, 2, 2]);
  });

  it('should refuse negative or fractional units and an empty layout', () => {
    expect(() => fillEvenly([1], -1)).toThrow(RangeError);
    expect(() => fillEvenly([1], 1.5)).toThrow(RangeError);
    expect(() => fillEvenly([], 1)).toThrow(RangeError);
  });
});
