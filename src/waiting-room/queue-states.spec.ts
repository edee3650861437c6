import { DoorConfig, HttpConfig, WaitingRoomConfig } from '../config/app-config';
import { drawnOrder, lotteryOrder, ticketIdFor } from './lottery';
import { DRAW_WAIT_MAX_MS, DRAW_WAIT_MIN_MS, DRAW_WAIT_TICKS, drawWaitUntil, QueueStates } from './queue-states';
import { AdmissionView, Draw, RoomRow, WaitingRoomRepository } from './waiting-room.repository';

const seed = Buffer.alloc(32, 9);
const bucketSeed = Buffer.alloc(32, 4);
const row: RoomRow = { productId: 7, seed, seedHash: 'h', preQueue: null, bucketMs: 100 };
const ids = ['ann', 'bob', 'cy'].map((u) => ticketIdFor(7, u));
const [ann, bob] = ids;
/** Bucket 42 holds the three tickets; its draw gives them positions 11, 12, 13 in lottery order. */
const BUCKET = 42;
const drawOf = (keys: Buffer | null): Draw => ({
  bucket: BUCKET,
  draw: 2,
  first: 11,
  tickets: 3,
  seed: bucketSeed,
  drawnAt: Date.now(),
  keys,
});
const order = lotteryOrder(bucketSeed, ids);
const placeOf = (id: string) => 11 + order.indexOf(id);
const viewOf = (over: Partial<AdmissionView>): AdmissionView => ({
  preQueue: null,
  preJoined: 2,
  highWater: 10,
  sealedThrough: 41,
  unsealed: true,
  admittedThrough: 0,
  outstanding: 0,
  unitsLeft: 1,
  live: [],
  ratePerS: 0,
  pausedSince: null,
  at: 0,
  ...over,
});

/**
 * QueueStates over a repository where the room is sealed through `sealed()`, bucket 42's order is
 * written as `written()`, and `drawing()` says whether another process is drawing it now.
 */
function statesOver(
  sealed: () => number,
  written: () => Buffer | null = () => drawnOrder(bucketSeed, ids),
  drawing: () => boolean = () => false,
  tickMs = 100,
) {
  const repo = {
    room: jest.fn(async () => row),
    view: jest.fn(async () => viewOf({ sealedThrough: sealed() })),
    sealedThrough: jest.fn(async () => sealed()),
    draws: jest.fn(async (_: number, after: number) => (sealed() >= BUCKET && after < BUCKET ? [drawOf(null)] : [])),
    drawnOrder: jest.fn(async () => written()),
    bucketTickets: jest.fn(async () => [...ids].reverse()),
    drawOrderOnce: jest.fn(async (_: number, __: number, order: (ids: string[]) => Buffer) =>
      drawing() ? null : order([...ids].reverse()),
    ),
  };
  const states = new QueueStates(
    repo as unknown as WaitingRoomRepository,
    Object.assign(new WaitingRoomConfig(), { admissionTickMs: tickMs }),
    new HttpConfig(),
    Object.assign(new DoorConfig(), { soldOutStaleMs: 1000 }),
  );
  return { states, repo };
}

describe("a ticket's place from its bucket's draw", () => {
  beforeEach(() => jest.useFakeTimers({ now: 1_000_000, doNotFake: ['nextTick', 'setImmediate'] }));
  afterEach(() => jest.useRealTimers());

  it('waits for the bucket to be sealed, then answers every waiting poll with its drawn place from one read loop', async () => {
    const sealedAt = Date.now() + 60;
    const { states, repo } = statesOver(() => (Date.now() < sealedAt ? 41 : 42));
    const until = Date.now() + 300;
    const places = Promise.all([states.place(7, BUCKET, ann, until), states.place(7, BUCKET, bob, until)]);
    await jest.advanceTimersByTimeAsync(100);
    const [a, b] = await places;
    expect({ ann: a.position, bob: b.position }).toEqual({ ann: placeOf(ann), bob: placeOf(bob) });
    // One loop for both polls: a light read every 25 ms until the seal showed; the draws read once
    // for what was sealed before (none here), once for the new one.
    expect(repo.sealedThrough.mock.calls.length).toBeLessThanOrEqual(4);
    expect(repo.draws).toHaveBeenCalledTimes(2);
    expect(repo.drawnOrder).toHaveBeenCalledTimes(1);
  });

  it('places a ticket of a bucket it holds already without any statement, and does not look for one with no time to wait', async () => {
    const { states, repo } = statesOver(() => 42);
    const calls = () => Object.values(repo).reduce((n, f) => n + f.mock.calls.length, 0);
    // A join's answer (its bucket still open): no time to wait, no statement, no place yet.
    expect(await states.place(7, BUCKET, ann, Date.now())).toEqual({ position: null, keyShare: null });
    expect(calls()).toBe(0);
    await states.place(7, BUCKET, ann, Date.now() + 1000);
    const before = calls();
    expect((await states.place(7, BUCKET, bob, Date.now())).position).toBe(placeOf(bob));
    expect(calls()).toBe(before);
  });

  it('draws the order of a bucket no process has written, unless another is drawing it now, then reads theirs', async () => {
    let theirs: Buffer | null = null;
    let drawing = true;
    const { states, repo } = statesOver(
      () => 42,
      () => theirs,
      () => drawing,
    );
    const settled = jest.fn();
    void states.place(7, BUCKET, ann, Date.now() + 1000).then(settled);
    await jest.advanceTimersByTimeAsync(60);
    expect(settled).not.toHaveBeenCalled();
    expect(repo.drawOrderOnce.mock.calls.length).toBeGreaterThan(0);
    // The other process wrote it: read, not drawn here.
    theirs = drawnOrder(bucketSeed, ids);
    drawing = false;
    const tries = repo.drawOrderOnce.mock.calls.length;
    await jest.advanceTimersByTimeAsync(30);
    expect(settled).toHaveBeenCalledWith({ position: placeOf(ann), keyShare: null });
    expect(repo.drawOrderOnce.mock.calls.length).toBe(tries);
    // Nobody wrote it and nobody is drawing it: this process draws it.
    const alone = statesOver(
      () => 42,
      () => null,
    );
    expect(await alone.states.place(7, BUCKET, bob, Date.now() + 1000)).toEqual({
      position: placeOf(bob),
      keyShare: null,
    });
    expect(alone.repo.drawOrderOnce).toHaveBeenCalledTimes(1);
  });

  it('answers its own waiting polls at once from a seal this process made, without reading the room', async () => {
    const { states, repo } = statesOver(
      () => 41,
      () => null,
    );
    const settled = jest.fn();
    void states.place(7, BUCKET, ann, Date.now() + 1000).then(settled);
    await jest.advanceTimersByTimeAsync(0);
    const reads = repo.sealedThrough.mock.calls.length;
    await states.sealed(7, { from: 42, through: 42, draws: [drawOf(null)] });
    await jest.advanceTimersByTimeAsync(0);
    expect(settled).toHaveBeenCalledWith({ position: placeOf(ann), keyShare: null });
    expect(repo.sealedThrough.mock.calls.length).toBe(reads);
    expect(repo.drawOrderOnce).toHaveBeenCalledTimes(1);
  });

  it('answers every poll by its time, also one that comes after the loop of the polls before it has ended', async () => {
    const { states, repo } = statesOver(() => 41);
    // A ticket its bucket's keys do not hold: its place needs the bucket's ids, slow the first time.
    let reads = 0;
    repo.bucketTickets.mockImplementation(
      () => new Promise((r) => setTimeout(() => r([...ids].reverse()), reads++ === 0 ? 100 : 10)),
    );
    const stranger = ticketIdFor(7, 'stranger');
    const first = jest.fn();
    void states.place(7, BUCKET, stranger, Date.now() + 1000).then(first);
    await jest.advanceTimersByTimeAsync(0);
    // This process seals: its answer of the waiting poll (the slow read) ends after the loop's.
    void states.sealed(7, { from: 42, through: 42, draws: [drawOf(null)] });
    await jest.advanceTimersByTimeAsync(150);
    expect(first).toHaveBeenCalledWith({ position: null, keyShare: null });
    const next = jest.fn();
    void states.place(7, 43, bob, Date.now() + 100).then(next);
    await jest.advanceTimersByTimeAsync(150);
    expect(next).toHaveBeenCalledWith({ position: null, keyShare: null });
  });

  it('gives up at the time it was given and answers unplaced; a pre-queue ticket with its key share', async () => {
    const { states } = statesOver(() => -1);
    const settled = jest.fn();
    void states.place(7, 0, ann, Date.now() + 200).then(settled);
    await jest.advanceTimersByTimeAsync(190);
    expect(settled).not.toHaveBeenCalled();
    await jest.advanceTimersByTimeAsync(30);
    expect(settled).toHaveBeenCalledWith({ position: null, keyShare: expect.any(Number) });
  });

  it('fails the polls waiting for a draw when a read fails, rather than holding them', async () => {
    let down = false;
    const { states } = statesOver(() => {
      if (down) throw new Error('connection refused');
      return 41;
    });
    const failed = jest.fn();
    void states.place(7, BUCKET, ann, Date.now() + 1000).catch(failed);
    down = true;
    await jest.advanceTimersByTimeAsync(25);
    expect(failed).toHaveBeenCalledWith(expect.objectContaining({ code: 'UNAVAILABLE' }));
  });
});

describe('how long a poll waits for its draw', () => {
  const now = 1_000_000_000;
  const bucketMs = 100;
  const tick = 100;

  it(`waits ${DRAW_WAIT_TICKS} ticks past the end of its bucket, ${DRAW_WAIT_MIN_MS} ms at least`, () => {
    const bucket = now / bucketMs; // ends in 100 ms
    expect(drawWaitUntil(bucket, bucketMs, null, now, 250)).toBe(now + 100 + DRAW_WAIT_TICKS * 250);
    expect(drawWaitUntil(bucket - 5, bucketMs, null, now, 250)).toBe(now + DRAW_WAIT_TICKS * 250);
    expect(drawWaitUntil(bucket, bucketMs, null, now, 20)).toBe(now + 100 + DRAW_WAIT_MIN_MS);
  });

  it(`holds a poll no longer than ${DRAW_WAIT_MAX_MS} ms however long the tick or the bucket`, () => {
    expect(drawWaitUntil(now / bucketMs, bucketMs, null, now, 10_000)).toBe(now + DRAW_WAIT_MAX_MS);
    expect(drawWaitUntil(Math.floor(now / 60_000) + 1, 60_000, null, now, tick)).toBe(now);
  });

  it('does not wait for the pre-queue before the start (its polls are paced by lottery key), and waits after it', () => {
    expect(drawWaitUntil(0, bucketMs, now + 500, now, tick)).toBe(now);
    expect(drawWaitUntil(0, bucketMs, now - 10, now, 250)).toBe(now + DRAW_WAIT_TICKS * 250);
  });
});
