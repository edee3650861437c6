// Arrival numbers for joins after the start, taken in groups: while one call to the queue's
// control slot is in flight, the joins that come meanwhile wait and share the next one. The order
// they came in is the order of their numbers, and a join that was answered before another began
// has the smaller number (it was in an earlier call), so positions keep arrival order exactly,
// while the control slot sees one call per process per round trip instead of one per buyer.
import { QueueControl } from './queue.store';

/** The control slot was missing: make it (QueueStates.readControl) and ask again. */
export class ControlMissing extends Error {}

interface Waiter {
  resolve: (taken: { control: QueueControl; arrival: number }) => void;
  reject: (err: unknown) => void;
}

export class ArrivalNumbers {
  private readonly waiting = new Map<number, Waiter[]>();
  private readonly inFlight = new Set<number>();

  constructor(private readonly arrive: (productId: number, n: number) => Promise<QueueControl | null>) {}

  take(productId: number): Promise<{ control: QueueControl; arrival: number }> {
    return new Promise((resolve, reject) => {
      const list = this.waiting.get(productId);
      if (list) list.push({ resolve, reject });
      else this.waiting.set(productId, [{ resolve, reject }]);
      if (!this.inFlight.has(productId)) this.flush(productId);
    });
  }

  private flush(productId: number): void {
    const group = this.waiting.get(productId);
    if (!group || group.length === 0) return;
    this.waiting.delete(productId);
    this.inFlight.add(productId);
    this.arrive(productId, group.length)
      .then(
        (control) => {
          if (control === null) throw new ControlMissing();
          const first = control.arrivals - group.length + 1;
          group.forEach((w, i) => w.resolve({ control, arrival: first + i }));
        },
        (err) => {
          throw err;
        },
      )
      .catch((err) => group.forEach((w) => w.reject(err)))
      .finally(() => {
        this.inFlight.delete(productId);
        this.flush(productId);
      });
  }
}
