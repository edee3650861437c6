// Calls taken in groups: while one call for a key (a product) is in flight, the calls that come
// meanwhile wait and go together in the next one. PostgreSQL then sees one statement per process
// per round trip instead of one per buyer. Used for the waiting room's joins, where the order
// inside a group is the order the joins came in (a join answered before another began was in an
// earlier call, so it has the smaller position), and for the lookups of whether an admission was
// spent, which every admitted buyer's poll and order makes.
// With no call in flight, a call does not go alone at once: the group leaves at the end of the
// event loop's turn (setImmediate), with every call whose request was read in that turn. Sent at
// once, the first of a burst went alone and the rest of the burst waited for it: a crowd's groups
// alternated 1, 99, 1, 99, each group of one costing a round trip.
// A key may have more than one call out (`calls`): the joins of one product, which PostgreSQL takes
// side by side, go in up to that many groups at once; the next group leaves when one returns.

interface Waiter<Out> {
  resolve: (out: Out) => void;
  reject: (err: unknown) => void;
}

export class GroupedCalls<In, Out> {
  private readonly waiting = new Map<number, Array<{ input: In } & Waiter<Out>>>();
  /** Per key, the calls out and the groups about to leave (at the end of this turn). */
  private readonly busy = new Map<number, number>();

  /** `call` answers one output per input, in the same order; at most `calls` of one key are out at once. */
  constructor(
    private readonly call: (key: number, inputs: In[]) => Promise<Out[]>,
    private readonly most = 2000,
    private readonly calls = 1,
  ) {}

  take(key: number, input: In): Promise<Out> {
    return new Promise((resolve, reject) => {
      const list = this.waiting.get(key);
      if (list) list.push({ input, resolve, reject });
      else this.waiting.set(key, [{ input, resolve, reject }]);
      this.schedule(key);
    });
  }

  /** A group leaves at the end of this turn, unless `calls` are out (the end of one sends the next group). */
  private schedule(key: number): void {
    const out = this.busy.get(key) ?? 0;
    if (out >= this.calls) return;
    this.busy.set(key, out + 1);
    setImmediate(() => this.flush(key));
  }

  private flush(key: number): void {
    const all = this.waiting.get(key);
    if (!all || all.length === 0) {
      const out = (this.busy.get(key) ?? 1) - 1;
      if (out > 0) this.busy.set(key, out);
      else this.busy.delete(key);
      return;
    }
    const group = all.splice(0, this.most);
    if (all.length === 0) this.waiting.delete(key);
    this.call(
      key,
      group.map((w) => w.input),
    )
      .then((outs) => {
        if (outs.length !== group.length) throw new Error(`a grouped call answered ${outs.length} of ${group.length}`);
        group.forEach((w, i) => w.resolve(outs[i]));
      })
      .catch((err: unknown) => group.forEach((w) => w.reject(err)))
      .finally(() => this.flush(key));
  }
}
