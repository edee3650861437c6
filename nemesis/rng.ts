// The nemesis's randomness: one seed, and a stream of its own for each part (the fault schedule, each
// buyer, the operator), so that a change to how often a buyer draws leaves the faults where they
// were. sfc32, seeded from SHA-256 of the seed and the stream's name.
import { createHash } from 'node:crypto';

export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(
    readonly seed: number,
    readonly stream = 'root',
  ) {
    const h = createHash('sha256').update(`${seed}/${stream}`).digest();
    [this.a, this.b, this.c, this.d] = [0, 4, 8, 12].map((i) => h.readUInt32LE(i));
    for (let i = 0; i < 12; i++) this.next();
  }

  /** Another stream of the same seed. */
  fork(stream: string): Rng {
    return new Rng(this.seed, `${this.stream}/${stream}`);
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.a >>>= 0;
    this.b >>>= 0;
    this.c >>>= 0;
    this.d >>>= 0;
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return (t >>> 0) / 4294967296;
  }

  /** An integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }

  /** A number in [lo, hi). */
  between(lo: number, hi: number): number {
    return lo + this.next() * (hi - lo);
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('pick from nothing');
    return items[Math.floor(this.next() * items.length)];
  }

  /** One of `weights`' keys, each as likely as its weight. */
  weighted<K extends string>(weights: Partial<Record<K, number>>): K {
    const entries = Object.entries(weights) as Array<[K, number]>;
    const total = entries.reduce((sum, [, w]) => sum + w, 0);
    let x = this.next() * total;
    for (const [k, w] of entries) {
      if ((x -= w) < 0) return k;
    }
    return entries[entries.length - 1][0];
  }

  /** `n` distinct items. */
  sample<T>(items: readonly T[], n: number): T[] {
    const left = [...items];
    const out: T[] = [];
    while (out.length < n && left.length > 0) out.push(left.splice(Math.floor(this.next() * left.length), 1)[0]);
    return out;
  }
}
