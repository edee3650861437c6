import { BoundedMap } from './bounded-map';

describe('BoundedMap', () => {
  it('should keep at most the bound, dropping the keys set longest ago and not read since', () => {
    const m = new BoundedMap<string, number>(4);
    for (const [i, k] of ['a', 'b', 'c', 'd', 'e'].entries()) m.set(k, i);
    expect(m.size).toBeLessThanOrEqual(4);
    expect(m.get('a')).toBeUndefined();
    expect(m.get('e')).toBe(4);
  });

  it('should keep a key that is read, however many are set after it', () => {
    const m = new BoundedMap<string, number>(4);
    m.set('kept', 0);
    for (let i = 0; i < 100; i++) {
      m.set(`k${i}`, i);
      expect(m.get('kept')).toBe(0);
      expect(m.size).toBeLessThanOrEqual(4);
    }
  });

  it('should replace a value without growing, also when the key is in the old generation', () => {
    const m = new BoundedMap<string, number>(4);
    m.set('a', 1);
    m.set('b', 2);
    m.set('c', 3); // a and b are now the old generation
    m.set('a', 10);
    expect(m.get('a')).toBe(10);
    expect(m.get('u')).toBeUndefined();
    expect(m.size).toBeLessThanOrEqual(4);
  });

  it('should make a missing value once and hand back the one it holds after', () => {
    const m = new BoundedMap<string, { n: number }>(4);
    const made = m.getOrAdd('a', () => ({ n: 1 }));
    made.n = 2;
    expect(m.getOrAdd('a', () => ({ n: 9 }))).toBe(made);
    expect(m.get('a')).toEqual({ n: 2 });
  });
});
