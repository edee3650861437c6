// What a process remembers per ticket is bounded. Two generations of a Map: new keys go to the
// young one; when it holds half the bound it becomes the old one and the previous old one is
// dropped whole. A hit in the old generation moves the key back to the young one, so what is still
// read stays. Every operation is O(1): evicting one oldest key at a time through `keys().next()`
// is not, because V8 leaves deleted slots at the front of a Map's table until it is rebuilt, and
// each lookup of the oldest key walks over them (a profile of 50,000 joins spent 7 % of the
// service's CPU there).

/** Values are never undefined (a miss and a stored undefined would look alike). */
export class BoundedMap<K, V extends object | string | number | boolean> {
  private young = new Map<K, V>();
  private old = new Map<K, V>();
  private readonly half: number;

  /** Holds at least `max / 2` and at most `max` keys. */
  constructor(max: number) {
    this.half = Math.max(1, Math.floor(max / 2));
  }

  get size(): number {
    return this.young.size + this.old.size;
  }

  get(key: K): V | undefined {
    const value = this.young.get(key);
    if (value !== undefined) return value;
    const kept = this.old.get(key);
    if (kept === undefined) return undefined;
    this.old.delete(key);
    this.set(key, kept);
    return kept;
  }

  /** The key's value, made by `make` and kept when there is none. */
  getOrAdd(key: K, make: () => V): V {
    let value = this.get(key);
    if (value === undefined) this.set(key, (value = make()));
    return value;
  }

  set(key: K, value: V): void {
    if (!this.young.has(key) && this.young.size >= this.half) {
      this.old = this.young;
      this.young = new Map();
    }
    this.old.delete(key);
    this.young.set(key, value);
  }
}
