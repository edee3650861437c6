// The local lock board: holds known without Redis, and releases handed to local waiters in order.
import { LocalLockBoard, MAX_LOCAL_STREAK } from './local-lock-board';

describe('LocalLockBoard', () => {
  it('should report a segment as held only between hold and release, per product', () => {
    const board = new LocalLockBoard();
    board.hold(1, 3);
    expect(board.isHeld(1, 3)).toBe(true);
    expect(board.isHeld(1, 4)).toBe(false);
    expect(board.isHeld(2, 3)).toBe(false);
    board.release(1, 3);
    expect(board.isHeld(1, 3)).toBe(false);
  });

  it('should wake the longest-waiting request with the released segment, one per release', async () => {
    const board = new LocalLockBoard();
    const first = board.waitForRelease(1, 10_000);
    const second = board.waitForRelease(1, 10_000);
    board.hold(1, 5);
    board.release(1, 5);
    await expect(first).resolves.toEqual({ kind: 'released', segment: 5 });
    expect(board.waiting(1)).toBe(1);
    board.hold(1, 6);
    board.release(1, 6);
    await expect(second).resolves.toEqual({ kind: 'released', segment: 6 });
    expect(board.waiting(1)).toBe(0);
  });

  /** Resolves 'pending' unless the promise settles within ms. */
  const within = <T>(p: Promise<T>, ms: number) =>
    Promise.race([p, new Promise<'pending'>((r) => setTimeout(() => r('pending'), ms))]);

  it('should leave a segment to other processes for lateWakeMs after MAX_LOCAL_STREAK local hand-offs in a row, then wake a local request for it', async () => {
    const board = new LocalLockBoard(40);
    for (let i = 0; i < MAX_LOCAL_STREAK; i++) {
      const waiting = board.waitForRelease(1, 10_000);
      board.hold(1, 0);
      board.release(1, 0);
      await expect(waiting).resolves.toEqual({ kind: 'released', segment: 0 });
    }
    const late = board.waitForRelease(1, 10_000);
    board.hold(1, 0);
    board.release(1, 0);
    // not handed on at once: free in Redis for whoever asks first, in any process
    expect(await within(late, 15)).toBe('pending');
    // nobody here took it meanwhile: the local request is woken for it
    await expect(late).resolves.toEqual({ kind: 'released', segment: 0 });
    // and the streak starts again after that
    const again = board.waitForRelease(1, 10_000);
    board.hold(1, 0);
    board.release(1, 0);
    await expect(again).resolves.toEqual({ kind: 'released', segment: 0 });
  });

  it('should not wake anyone late for a segment a request of this process took again in the meantime', async () => {
    const board = new LocalLockBoard(10);
    for (let i = 0; i < MAX_LOCAL_STREAK; i++) {
      const waiting = board.waitForRelease(1, 10_000);
      board.hold(1, 0);
      board.release(1, 0);
      await waiting;
    }
    const late = board.waitForRelease(1, 60);
    board.hold(1, 0);
    board.release(1, 0);
    board.hold(1, 0); // taken again here before the late wake
    await expect(late).resolves.toEqual({ kind: 'timedOut' });
  });

  it('should give a request that waits again with its ticket its place in line back, ahead of later arrivals', async () => {
    const board = new LocalLockBoard();
    const early = board.ticket();
    const first = board.waitForRelease(1, 5, undefined, early);
    const later = board.waitForRelease(1, 10_000);
    await expect(first).resolves.toEqual({ kind: 'timedOut' });
    // its timer ended the first wait; it waits again, with the ticket it had
    const again = board.waitForRelease(1, 10_000, undefined, early);
    board.hold(1, 2);
    board.release(1, 2);
    await expect(again).resolves.toEqual({ kind: 'released', segment: 2 });
    expect(board.waiting(1)).toBe(1);
    board.hold(1, 2);
    board.release(1, 2);
    await expect(later).resolves.toEqual({ kind: 'released', segment: 2 });
  });

  it('should not wake anyone when a hold is abandoned (Redis said busy)', async () => {
    const board = new LocalLockBoard();
    const waiting = board.waitForRelease(1, 30);
    board.hold(1, 2);
    board.abandon(1, 2);
    expect(board.isHeld(1, 2)).toBe(false);
    // the timer, not the abandon, ends the wait
    await expect(waiting).resolves.toEqual({ kind: 'timedOut' });
  });

  it('should skip waiters whose timer already fired and wake the next one', async () => {
    const board = new LocalLockBoard();
    const timedOut = board.waitForRelease(1, 1);
    await expect(timedOut).resolves.toEqual({ kind: 'timedOut' });
    const live = board.waitForRelease(1, 10_000);
    board.release(1, 0);
    await expect(live).resolves.toEqual({ kind: 'released', segment: 0 });
  });

  it('should keep products apart: a release wakes only waiters of its product', async () => {
    const board = new LocalLockBoard();
    const other = board.waitForRelease(2, 30);
    board.release(1, 0);
    await expect(other).resolves.toEqual({ kind: 'timedOut' });
  });

  describe('riders (group commit)', () => {
    it('should hand at most max riders to a holder, longest-waiting first, and answer each with what the holder served', async () => {
      const board = new LocalLockBoard<string, string>();
      const a = board.waitForRelease(1, 10_000, 'a');
      const b = board.waitForRelease(1, 10_000, 'b');
      const c = board.waitForRelease(1, 10_000, 'c');
      const riders = board.takeRiders(1, 2);
      expect(riders.map((r) => r.ride)).toEqual(['a', 'b']);
      expect(board.waiting(1)).toBe(1);
      riders[1].serve('sold b');
      riders[0].serve('sold a');
      await expect(a).resolves.toEqual({ kind: 'served', answer: 'sold a' });
      await expect(b).resolves.toEqual({ kind: 'served', answer: 'sold b' });
      // the one left still waits for a release
      board.release(1, 4);
      await expect(c).resolves.toEqual({ kind: 'released', segment: 4 });
    });

    it('should not take waiters without a ride, waiters of another product, or waiters whose timer fired', async () => {
      const board = new LocalLockBoard<string, string>();
      const plain = board.waitForRelease(1, 30);
      const other = board.waitForRelease(2, 30, 'other');
      const late = board.waitForRelease(1, 1, 'late');
      await expect(late).resolves.toEqual({ kind: 'timedOut' });
      expect(board.takeRiders(1, 10)).toEqual([]);
      await expect(plain).resolves.toEqual({ kind: 'timedOut' });
      await expect(other).resolves.toEqual({ kind: 'timedOut' });
    });

    it('should not wake a rider on a release once a holder has taken it', async () => {
      const board = new LocalLockBoard<string, string>();
      const ride = board.waitForRelease(1, 50, 'r');
      const [rider] = board.takeRiders(1, 5);
      board.release(1, 0);
      // neither the release nor the timer ends a taken ride: only its answer does
      await new Promise((r) => setTimeout(r, 80));
      rider.serve('answered');
      await expect(ride).resolves.toEqual({ kind: 'served', answer: 'answered' });
    });
  });
});
