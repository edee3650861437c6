// What this process knows without asking Redis: which segment locks it holds itself, and who in
// this process waits for one of a product's segments. A request skips a segment held here at no
// cost, and a release wakes one local waiter at once instead of leaving the lock idle until that
// waiter's backoff timer fires. Other processes still contend through Redis as before.
//
// Handing a lock from one local request to the next is instant, so a busy process would keep a
// segment to itself and starve the waiters of other processes (a 1-segment sale saw 503 BUSY that
// way). After MAX_LOCAL_STREAK hand-offs in a row the next release wakes nobody at once: the lock
// is free for whoever asks Redis first, in any process, and only after `lateWakeMs`, if nobody here
// has taken it, is a local request woken for it (local waiters may be waiting without a timer of
// their own that would come back to it soon).
//
// Group commit: a waiter may carry a ride (what it wants to buy). A request that has just taken a
// segment lock takes riders off the queue and serves them in its own lock hold; a rider is then
// answered with the holder's result for it instead of being woken.

/** How a wait ended: a segment released here, the timer, or a holder that served the ride. */
export type WaitEnd<A> = { kind: 'released'; segment: number } | { kind: 'timedOut' } | { kind: 'served'; answer: A };

/** A waiting request taken by a lock holder: what it asked for, and how to answer it. */
export interface Rider<R, A> {
  readonly ride: R;
  serve(answer: A): void;
}

type Waiter<R, A> = { end: (how: WaitEnd<A>) => void; done: boolean; ride?: R; timer?: NodeJS.Timeout; ticket: number };

export const MAX_LOCAL_STREAK = 3;

export class LocalLockBoard<R = unknown, A = unknown> {
  private readonly held = new Map<number, Set<number>>();
  private readonly waiters = new Map<number, Array<Waiter<R, A>>>();
  private readonly live = new Map<number, number>();
  /** Consecutive local hand-offs per `${productId}:${segment}`. */
  private readonly streaks = new Map<string, number>();

  /** Hands out arrival tickets: the wait queue is kept in ticket order. */
  private nextTicket = 0;

  constructor(private readonly lateWakeMs = 4) {}

  /** A place in line for a request about to wait for the first time; it keeps it for every later wait. */
  ticket(): number {
    return this.nextTicket++;
  }

  /** Held here, or being taken by a request of this process. */
  isHeld(productId: number, segment: number): boolean {
    return this.held.get(productId)?.has(segment) ?? false;
  }

  /** How many of the product's segments are held here (or being taken). */
  holds(productId: number): number {
    return this.held.get(productId)?.size ?? 0;
  }

  hold(productId: number, segment: number): void {
    const set = this.held.get(productId);
    if (set) set.add(segment);
    else this.held.set(productId, new Set([segment]));
  }

  /** Forgets a hold that never became a lock (Redis said busy): nobody is woken for it. */
  abandon(productId: number, segment: number): void {
    const set = this.held.get(productId);
    set?.delete(segment);
    if (set?.size === 0) this.held.delete(productId);
  }

  /**
   * Forgets the hold and hands the segment to the longest-waiting local request for the product,
   * unless this process has already handed it on MAX_LOCAL_STREAK times in a row.
   */
  release(productId: number, segment: number): void {
    this.abandon(productId, segment);
    const key = `${productId}:${segment}`;
    const streak = this.streaks.get(key) ?? 0;
    if (streak >= MAX_LOCAL_STREAK) {
      this.streaks.delete(key);
      setTimeout(() => {
        if (!this.isHeld(productId, segment)) this.wakeOne(productId, segment);
      }, this.lateWakeMs).unref();
      return;
    }
    if (this.wakeOne(productId, segment)) this.streaks.set(key, streak + 1);
    else this.streaks.delete(key);
  }

  /** Wakes the longest-waiting local request of the product with the segment; false when none waits. */
  private wakeOne(productId: number, segment: number): boolean {
    const queue = this.waiters.get(productId);
    let woke = false;
    while (queue && queue.length > 0 && !woke) {
      const next = queue.shift() as Waiter<R, A>;
      if (next.done) continue;
      next.done = true;
      this.count(productId, -1);
      next.end({ kind: 'released', segment });
      woke = true;
    }
    if (queue && queue.length === 0) this.waiters.delete(productId);
    return woke;
  }

  /**
   * Waits until a segment of the product is released here (released), a holder serves the ride
   * (served), or `ms` pass (timedOut), whichever is first. A request that waits again
   * (its timer ended the last wait, or its try failed) passes its ticket and gets its place in line
   * back instead of going to the end: releases and holders serve the queue in ticket order.
   */
  waitForRelease(productId: number, ms: number, ride?: R, ticket = this.ticket()): Promise<WaitEnd<A>> {
    return new Promise((resolve) => {
      const waiter: Waiter<R, A> = { end: () => undefined, done: false, ride, ticket };
      waiter.timer = setTimeout(() => {
        waiter.done = true;
        this.count(productId, -1);
        resolve({ kind: 'timedOut' });
      }, ms);
      waiter.end = (how) => {
        clearTimeout(waiter.timer);
        resolve(how);
      };
      const queue = this.waiters.get(productId) ?? [];
      let at = queue.length;
      while (at > 0 && queue[at - 1].ticket > ticket) at--;
      queue.splice(at, 0, waiter);
      this.waiters.set(productId, queue);
      this.count(productId, 1);
    });
  }

  /**
   * Takes up to `max` waiters of the product that carry a ride, longest-waiting first, off the
   * queue. Each must then be answered exactly once through `serve`.
   */
  takeRiders(productId: number, max: number): Array<Rider<R, A>> {
    const queue = this.waiters.get(productId);
    if (!queue || max <= 0) return [];
    const riders: Array<Rider<R, A>> = [];
    const rest: Array<Waiter<R, A>> = [];
    for (const w of queue) {
      if (w.done) continue;
      if (riders.length < max && w.ride !== undefined) {
        // Taken: only its answer ends the wait now, not its timer.
        clearTimeout(w.timer);
        w.done = true;
        this.count(productId, -1);
        const ride = w.ride;
        riders.push({ ride, serve: (answer) => w.end({ kind: 'served', answer }) });
      } else {
        rest.push(w);
      }
    }
    if (rest.length === 0) this.waiters.delete(productId);
    else this.waiters.set(productId, rest);
    return riders;
  }

  /** Requests of this process waiting for a segment of the product. */
  waiting(productId: number): number {
    return this.live.get(productId) ?? 0;
  }

  private count(productId: number, delta: number): void {
    const n = (this.live.get(productId) ?? 0) + delta;
    if (n === 0) this.live.delete(productId);
    else this.live.set(productId, n);
  }
}
