// What this process knows without asking Redis: which segment locks it holds itself, and who in
// this process waits for one of a product's segments. A request skips a segment held here at no
// cost, and a release wakes one local waiter at once instead of leaving the lock idle until that
// waiter's backoff timer fires. Other processes still contend through Redis as before.
//
// Handing a lock from one local request to the next is instant, so a busy process would keep a
// segment to itself and starve the waiters of other processes (a 1-segment sale saw 503 BUSY that
// way). After MAX_LOCAL_STREAK hand-offs in a row the next release wakes nobody: the lock is then
// free for whoever asks Redis first, in any process.

type Waiter = { wake: (segment: number) => void; done: boolean };

export const MAX_LOCAL_STREAK = 3;

export class LocalLockBoard {
  private readonly held = new Map<number, Set<number>>();
  private readonly waiters = new Map<number, Waiter[]>();
  private readonly live = new Map<number, number>();
  /** Consecutive local hand-offs per `${productId}:${segment}`. */
  private readonly streaks = new Map<string, number>();

  /** Held here, or being taken by a request of this process. */
  isHeld(productId: number, segment: number): boolean {
    return this.held.get(productId)?.has(segment) ?? false;
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
      return;
    }
    const queue = this.waiters.get(productId);
    let woke = false;
    while (queue && queue.length > 0 && !woke) {
      const next = queue.shift() as Waiter;
      if (next.done) continue;
      next.done = true;
      this.count(productId, -1);
      next.wake(segment);
      woke = true;
    }
    if (queue && queue.length === 0) this.waiters.delete(productId);
    if (woke) this.streaks.set(key, streak + 1);
    else this.streaks.delete(key);
  }

  /**
   * Resolves with the index of a segment of the product released here, or with null after `ms`,
   * whichever is first.
   */
  waitForRelease(productId: number, ms: number): Promise<number | null> {
    return new Promise((resolve) => {
      const waiter: Waiter = { wake: () => undefined, done: false };
      const timer = setTimeout(() => {
        waiter.done = true;
        this.count(productId, -1);
        resolve(null);
      }, ms);
      waiter.wake = (segment) => {
        clearTimeout(timer);
        resolve(segment);
      };
      const queue = this.waiters.get(productId) ?? [];
      queue.push(waiter);
      this.waiters.set(productId, queue);
      this.count(productId, 1);
    });
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
