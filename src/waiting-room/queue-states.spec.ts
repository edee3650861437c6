import { DoorConfig, HttpConfig, WaitingRoomConfig } from '../config/app-config';
import { lotteryKey, ticketIdFor } from './lottery';
import { DRAW_WAIT_MAX_MS, DRAW_WAIT_TICKS, QueueStates } from './queue-states';
import { AdmissionView, RoomRow, WaitingRoomRepository } from './waiting-room.repository';

const seed = Buffer.alloc(32, 9);
const row: RoomRow = { productId: 7, seed, seedHash: 'h', preQueue: null, highWater: 0, admittedThrough: 0 };
const ann = ticketIdFor(7, 'ann');
const bob = ticketIdFor(7, 'bob');
/** The drawn pre-queue as PostgreSQL gives it: each key's first 8 bytes, in draw order. */
const drawnKeys = Buffer.concat(
  [ann, bob].map((t) => Buffer.from(lotteryKey(seed, t).slice(0, 16), 'hex')).sort((x, y) => Buffer.compare(x, y)),
);
const annDrawn = drawnKeys.subarray(0, 8).equals(Buffer.from(lotteryKey(seed, ann).slice(0, 16), 'hex')) ? 1 : 2;
const viewOf = (over: Partial<AdmissionView>): AdmissionView => ({
  preQueue: null,
  preJoined: 2,
  highWater: 2,
  admittedThrough: 0,
  outstanding: 0,
  unitsLeft: 1,
  live: [],
  ratePerS: 0,
  pausedSince: null,
  at: 0,
  ...over,
});

/** QueueStates over a repository whose admission view is `views()` at each read (tick: 100 ms). */
function statesOver(views: () => AdmissionView, admissionTickMs = 100) {
  const repo = {
    room: jest.fn(async () => row),
    view: jest.fn(async () => views()),
    drawnKeys: jest.fn(async () => drawnKeys),
    position: jest.fn(async () => null),
  };
  const states = new QueueStates(
    repo as unknown as WaitingRoomRepository,
    Object.assign(new WaitingRoomConfig(), { admissionTickMs }),
    new HttpConfig(),
    Object.assign(new DoorConfig(), { soldOutStaleMs: 1000 }),
  );
  return { states, repo };
}

describe("a pre-queue ticket's place around the draw", () => {
  beforeEach(() => jest.useFakeTimers({ now: 1_000_000, doNotFake: ['nextTick', 'setImmediate'] }));
  afterEach(() => jest.useRealTimers());

  it('waits, after the start, for the draw and the first admission, and answers with the drawn place', async () => {
    const drawnAt = Date.now() + 60;
    const { states, repo } = statesOver(() =>
      Date.now() < drawnAt ? viewOf({}) : viewOf({ preQueue: 2, admittedThrough: 1, outstanding: 1 }),
    );
    const places = Promise.all([states.preQueuePlace(7, 'ann', ann, true), states.preQueuePlace(7, 'bob', bob, true)]);
    await jest.advanceTimersByTimeAsync(100);
    const [a, b] = await places;
    expect({ ann: a.position, bob: b.position }).toEqual({ ann: annDrawn, bob: 3 - annDrawn });
    // One read loop for both polls: the first read, then one every 25 ms until the draw showed.
    expect(repo.view.mock.calls.length).toBeLessThanOrEqual(4);
  });

  it('waits for the first admission when the view shows the draw without it yet', async () => {
    let admitted = 0;
    const { states, repo } = statesOver(() => viewOf({ preQueue: 2, admittedThrough: admitted }));
    const settled = jest.fn();
    void states.preQueuePlace(7, 'ann', ann, true).then(settled);
    await jest.advanceTimersByTimeAsync(60);
    expect(settled).not.toHaveBeenCalled();
    admitted = 1;
    await jest.advanceTimersByTimeAsync(25);
    expect(settled).toHaveBeenCalledWith(expect.objectContaining({ position: annDrawn }));
    expect(repo.view.mock.calls.length).toBeGreaterThan(2);
  });

  it('does not wait once the view shows the draw and an admission (or nothing is left to admit)', async () => {
    for (const shown of [{ admittedThrough: 1 }, { unitsLeft: 0 }]) {
      const { states, repo } = statesOver(() => viewOf({ preQueue: 2, ...shown }));
      const settled = jest.fn();
      void states.preQueuePlace(7, 'ann', ann, true).then(settled);
      await jest.advanceTimersByTimeAsync(0);
      expect(settled).toHaveBeenCalledWith(expect.objectContaining({ position: annDrawn }));
      expect(repo.view).toHaveBeenCalledTimes(1);
    }
  });

  it(`gives up waiting after ${DRAW_WAIT_TICKS} ticks and answers as before the draw (its key's share)`, async () => {
    const { states, repo } = statesOver(() => viewOf({}));
    const settled = jest.fn();
    void states.preQueuePlace(7, 'ann', ann, true).then(settled);
    await jest.advanceTimersByTimeAsync(DRAW_WAIT_TICKS * 100 - 30);
    expect(settled).not.toHaveBeenCalled();
    await jest.advanceTimersByTimeAsync(30);
    expect(settled).toHaveBeenCalledWith(expect.objectContaining({ position: null, keyShare: expect.any(Number) }));
    const reads = repo.view.mock.calls.length;
    expect(reads).toBeLessThanOrEqual(DRAW_WAIT_TICKS * 4 + 1); // the first read, then one every 25 ms
  });

  it(`holds a poll no longer than ${DRAW_WAIT_MAX_MS} ms however long the tick`, async () => {
    const { states } = statesOver(() => viewOf({}), 10_000);
    const settled = jest.fn();
    void states.preQueuePlace(7, 'ann', ann, true).then(settled);
    await jest.advanceTimersByTimeAsync(DRAW_WAIT_MAX_MS - 100);
    expect(settled).not.toHaveBeenCalled();
    await jest.advanceTimersByTimeAsync(100);
    expect(settled).toHaveBeenCalledWith(expect.objectContaining({ position: null }));
  });

  it('fails the polls waiting for the draw when a read of the view fails, rather than holding them', async () => {
    let down = false;
    const { states } = statesOver(() => {
      if (down) throw new Error('connection refused');
      return viewOf({});
    });
    const failed = jest.fn();
    void states.preQueuePlace(7, 'ann', ann, true).catch(failed);
    down = true;
    await jest.advanceTimersByTimeAsync(25);
    expect(failed).toHaveBeenCalledWith(expect.objectContaining({ code: 'UNAVAILABLE' }));
  });

  it('does not wait before the start: the draw is not due', async () => {
    const { states, repo } = statesOver(() => viewOf({}));
    const settled = jest.fn();
    void states.preQueuePlace(7, 'ann', ann, false).then(settled);
    await jest.advanceTimersByTimeAsync(0);
    expect(settled).toHaveBeenCalledWith(expect.objectContaining({ position: null, keyShare: expect.any(Number) }));
    expect(repo.view).toHaveBeenCalledTimes(1);
  });
});
