// Joins taken in groups: while one call for a product is in flight, the joins that come meanwhile
// wait and go together in the next one. PostgreSQL then sees one call per process per round trip
// instead of one per buyer, and the order inside a group is the order the joins came in; a join
// answered before another began was in an earlier call, so it has the smaller position.
// With no call in flight, a join does not go alone at once: the group leaves at the end of the
// event loop's turn (setImmediate), with every join whose request was read in that turn. Sent at
// once, the first of a burst went alone and the rest of the burst waited for it: a crowd's groups
// alternated 1, 99, 1, 99, each group of one costing a round trip.
// Two calls of a key may be out at once: while PostgreSQL numbers one group, this process reads and
// checks the next one's requests, instead of the two waiting for each other in turn. The order a
// client can see still holds: calls out at once hold joins none of which was answered before
// another began, and PostgreSQL numbers the two groups one after the other (the counter row).

interface Waiter<Out> {
  resolve: (out: Out) => void;
  reject: (err: unknown) => void;
}

export class GroupedCalls<In, Out> {
  private readonly waiting = new Map<number, Array<{ input: In } & Waiter<Out>>>();
  /** Calls out per key, counting one about to leave (scheduled for the end of this turn). */
  private readonly out = new Map<number, number>();
  /** Keys with a group scheduled to leave at the end of this turn. */
  private readonly scheduled = new Set<number>();

  /** `call` answers one output per input, in the same order. */
  constructor(
    private readonly call: (key: number, inputs: In[]) => Promise<Out[]>,
    private readonly most = 2000,
    private readonly parallel = 2,
  ) {}

  take(key: number, input: In): Promise<Out> {
    return new Promise((resolve, reject) => {
      const list = this.waiting.get(key);
      if (list) list.push({ input, resolve, reject });
      else this.waiting.set(key, [{ input, resolve, reject }]);
      this.schedule(key);
    });
  }

  /** A group leaves at the end of this turn, if a call may still go out. */
  private schedule(key: number): void {
    if (this.scheduled.has(key) || (this.out.get(key) ?? 0) >= this.parallel) return;
    this.scheduled.add(key);
    setImmediate(() => {
      this.scheduled.delete(key);
      // A call that came back meanwhile may have taken the slot; its end flushes again.
      if ((this.out.get(key) ?? 0) < this.parallel) this.flush(key);
    });
  }

  private flush(key: number): void {
    const all = this.waiting.get(key);
    if (!all || all.length === 0) return;
    const group = all.splice(0, this.most);
    if (all.length === 0) this.waiting.delete(key);
    this.out.set(key, (this.out.get(key) ?? 0) + 1);
    this.call(
      key,
      group.map((w) => w.input),
    )
      .then((outs) => {
        if (outs.length !== group.length) throw new Error(`a grouped call answered ${outs.length} of ${group.length}`);
        group.forEach((w, i) => w.resolve(outs[i]));
      })
      .catch((err: unknown) => group.forEach((w) => w.reject(err)))
      .finally(() => {
        const left = (this.out.get(key) ?? 1) - 1;
        if (left === 0) this.out.delete(key);
        else this.out.set(key, left);
        this.flush(key);
      });
  }
}
