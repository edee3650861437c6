import { setBounded } from './bounded-map';

describe('setBounded', () => {
  it('should drop the oldest entry when full, and keep the size when a key is set again', () => {
    const m = new Map<string, number>();
    setBounded(m, 'a', 1, 2);
    setBounded(m, 'b', 2, 2);
    setBounded(m, 'b', 3, 2);
    expect([...m]).toEqual([
      ['a', 1],
      ['b', 3],
    ]);
    setBounded(m, 'c', 4, 2);
    expect([...m]).toEqual([
      ['b', 3],
      ['c', 4],
    ]);
  });
});
