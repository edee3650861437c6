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
    await expect(first).resolves.toBe(5);
    expect(board.waiting(1)).toBe(1);
    board.hold(1, 6);
    board.release(1, 6);
    await expect(second).resolves.toBe(6);
    expect(board.waiting(1)).toBe(0);
  });

  it('should let a segment go to anyone after MAX_LOCAL_STREAK local hand-offs in a row, so other processes get their turn', async () => {
    const board = new LocalLockBoard();
    const woken: Array<number | null> = [];
    for (let i = 0; i <= MAX_LOCAL_STREAK; i++) {
      const waiting = board.waitForRelease(1, 30);
      board.hold(1, 0);
      board.release(1, 0);
      woken.push(await waiting);
    }
    // the first MAX_LOCAL_STREAK releases were handed on; the next one woke nobody (timer ended it)
    expect(woken).toEqual([...Array(MAX_LOCAL_STREAK).fill(0), null]);
    // and the streak starts again after that
    const again = board.waitForRelease(1, 10_000);
    board.release(1, 0);
    await expect(again).resolves.toBe(0);
  });

  it('should not wake anyone when a hold is abandoned (Redis said busy)', async () => {
    const board = new LocalLockBoard();
    const waiting = board.waitForRelease(1, 30);
    board.hold(1, 2);
    board.abandon(1, 2);
    expect(board.isHeld(1, 2)).toBe(false);
    // the timer, not the abandon, ends the wait
    await expect(waiting).resolves.toBeNull();
  });

  it('should skip waiters whose timer already fired and wake the next one', async () => {
    const board = new LocalLockBoard();
    const timedOut = board.waitForRelease(1, 1);
    await expect(timedOut).resolves.toBeNull();
    const live = board.waitForRelease(1, 10_000);
    board.release(1, 0);
    await expect(live).resolves.toBe(0);
  });

  it('should keep products apart: a release wakes only waiters of its product', async () => {
    const board = new LocalLockBoard();
    const other = board.waitForRelease(2, 30);
    board.release(1, 0);
    await expect(other).resolves.toBeNull();
  });
});
