// The difficulty in force for one product, from the joins this process has let in (a refused join
// counts for nothing). At or below POW_JOINS_PER_S the first step applies; each doubling of the
// rate above that level adds one step (up to the last); a step that the rate no longer calls for is
// left one step at a time, each after POW_EASE_S seconds below it, counted from when the rate fell
// below it. The rate changes only at a join or at the turn of a second, so the step in force is
// worked out from the time that passed, whether anyone asked meanwhile or not. Counting is per
// process: N processes behind a balancer each see about 1/N of the crowd, so the level is per
// process too (docs/proof-of-work.md).

export interface DifficultySettings {
  /** The largest secret number of a challenge at each step, rising. */
  steps: readonly number[];
  /** Joins per second (per product, per process) above which the step rises. */
  joinsPerS: number;
  /** Seconds below a step's level before easing by one step. */
  easeS: number;
}

interface ProductLoad {
  /** The whole second being counted (epoch s) and its joins so far. */
  second: number;
  count: number;
  /** Joins in the second before `second` (0 when that second had none). */
  previous: number;
  step: number;
  /** Epoch ms up to which `step` has been worked out. */
  at: number;
  /** Epoch ms since when the rate has called for less than `step` (the ease timer); null while it calls for `step`. */
  below: number | null;
}

/** Products followed at most per process; the least recently counted go first. */
const MAX_PRODUCTS = 10_000;

/** The step a rate of joins per second calls for. */
export function stepFor(rate: number, s: Pick<DifficultySettings, 'joinsPerS' | 'steps'>): number {
  if (rate <= s.joinsPerS) return 0;
  return Math.min(s.steps.length - 1, 1 + Math.floor(Math.log2(rate / s.joinsPerS)));
}

export class AdaptiveDifficulty {
  private readonly loads = new Map<number, ProductLoad>();

  constructor(private readonly settings: DifficultySettings) {}

  /** Counts one join of the product that was let in, at `now` (epoch ms). */
  count(productId: number, now: number): void {
    let load = this.loads.get(productId);
    if (load === undefined) {
      if (this.loads.size >= MAX_PRODUCTS) this.loads.delete(this.loads.keys().next().value as number);
      load = { second: Math.floor(now / 1000), count: 0, previous: 0, step: 0, at: now, below: null };
      this.loads.set(productId, load);
    }
    this.advance(load, now);
    load.count++;
    // A rise takes effect with the join that makes it.
    this.settle(load, now);
  }

  /** The step in force for the product at `now`: its index and its largest secret number. */
  current(productId: number, now: number): { step: number; maxNumber: number } {
    const load = this.loads.get(productId);
    if (load === undefined) return { step: 0, maxNumber: this.settings.steps[0] };
    this.advance(load, now);
    return { step: load.step, maxNumber: this.settings.steps[load.step] };
  }

  /** The least difficulty a solution may have at `now`: one step below the one in force, so a step that rose while a buyer solved costs them nothing. */
  floor(productId: number, now: number): number {
    const { step } = this.current(productId, now);
    return this.settings.steps[Math.max(0, step - 1)];
  }

  /**
   * Works the step out up to `now`, second by second while the counted rate still changes at their
   * turns (the second of the last join, then the one after it, where that second's joins are the
   * previous second's); from then on the rate is 0 until the next join, so the rest is one span.
   */
  private advance(load: ProductLoad, now: number): void {
    const second = Math.floor(now / 1000);
    while (load.second < second && (load.count > 0 || load.previous > 0)) {
      const turn = (load.second + 1) * 1000;
      this.settle(load, turn);
      load.previous = load.count;
      load.count = 0;
      load.second++;
    }
    if (load.second < second) {
      load.second = second;
      // No join for a whole second or more: the time up to now ran at a rate of 0.
      load.previous = 0;
    }
    this.settle(load, now);
  }

  /** Applies the rate counted now to the time from `load.at` to `until`: a rise at once, an ease per POW_EASE_S below the step. */
  private settle(load: ProductLoad, until: number): void {
    const wanted = stepFor(Math.max(load.count, load.previous), this.settings);
    if (wanted >= load.step) {
      load.step = wanted;
      load.below = null;
    } else {
      const easeMs = this.settings.easeS * 1000;
      load.below ??= load.at;
      while (load.step > wanted && until - load.below >= easeMs) {
        load.step--;
        // The next step down waits its own POW_EASE_S, from this ease.
        load.below += easeMs;
      }
      if (load.step === wanted) load.below = null;
    }
    load.at = Math.max(load.at, until);
  }
}
