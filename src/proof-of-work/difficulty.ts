// The difficulty in force for one product, from the joins this process has seen of it. At or below
// POW_JOINS_PER_S the first step applies; each doubling of the rate above that level adds one step
// (up to the last); a step that the rate no longer calls for is left one step at a time, each after
// POW_EASE_S seconds below it. Counting is per process: N processes behind a balancer each see
// about 1/N of the crowd, so the level is per process too (docs/proof-of-work.md).

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
  /** Epoch ms of the last change of step. */
  since: number;
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

  /** Counts one join of the product at `now` (epoch ms). */
  count(productId: number, now: number): void {
    const load = this.roll(productId, now);
    load.count++;
    // The step follows the crowd as it comes, whether or not anyone asks for a challenge meanwhile.
    this.current(productId, now);
  }

  /** The step in force for the product at `now`: its index and its largest secret number. */
  current(productId: number, now: number): { step: number; maxNumber: number } {
    const load = this.loads.get(productId);
    if (load === undefined) return { step: 0, maxNumber: this.settings.steps[0] };
    this.roll(productId, now);
    const wanted = stepFor(Math.max(load.count, load.previous), this.settings);
    if (wanted > load.step) {
      load.step = wanted;
      load.since = now;
    } else if (wanted < load.step && now - load.since >= this.settings.easeS * 1000) {
      load.step--;
      load.since = now;
    }
    return { step: load.step, maxNumber: this.settings.steps[load.step] };
  }

  /** The least difficulty a solution may have at `now`: one step below the one in force, so a step that rose while a buyer solved costs them nothing. */
  floor(productId: number, now: number): number {
    const { step } = this.current(productId, now);
    return this.settings.steps[Math.max(0, step - 1)];
  }

  private roll(productId: number, now: number): ProductLoad {
    const second = Math.floor(now / 1000);
    let load = this.loads.get(productId);
    if (load === undefined) {
      if (this.loads.size >= MAX_PRODUCTS) this.loads.delete(this.loads.keys().next().value as number);
      load = { second, count: 0, previous: 0, step: 0, since: now };
      this.loads.set(productId, load);
    } else if (second > load.second) {
      load.previous = second === load.second + 1 ? load.count : 0;
      load.second = second;
      load.count = 0;
    }
    return load;
  }
}
