import { DoorConfig, HttpConfig, WaitingRoomConfig } from '../config/app-config';
import { SoldOutBoardService } from '../inventory/sold-out-board.service';
import { MetricsService } from '../metrics/metrics.service';
import { Admitter } from './admitter';
import { QueueStates } from './queue-states';
import { ActiveRoom, AdmissionState, AdmissionView, Seal, WaitingRoomRepository } from './waiting-room.repository';

const room: ActiveRoom = { productId: 7, startsAt: null, endsAt: null, admissionTtlS: 120, bucketMs: 100 };
const viewOf = (over: Partial<AdmissionView>): AdmissionView => ({
  preQueue: 0,
  preJoined: 0,
  highWater: 500,
  sealedThrough: 5,
  unsealed: false,
  admittedThrough: 100,
  outstanding: 0,
  unitsLeft: 0,
  live: [],
  ratePerS: 0,
  pausedSince: null,
  at: 0,
  ...over,
});

/** The admitter over the real QueueStates, with the repository's PostgreSQL calls counted. */
function admitterOver(view: () => AdmissionView, returnedAt = () => 0) {
  const state = (): AdmissionState => {
    const v = view();
    return {
      unitsLeft: v.unitsLeft,
      outstanding: v.outstanding,
      placed: v.highWater,
      admittedThrough: v.admittedThrough,
    };
  };
  const repo = {
    room: jest.fn(async () => ({ productId: 7, seed: Buffer.alloc(32), seedHash: 'h', preQueue: 0, bucketMs: 100 })),
    view: jest.fn(async () => view()),
    exclusively: jest.fn(async (_: number, work: (q: unknown) => Promise<unknown>) => work(null)),
    seal: jest.fn(async (_productId: number, _q?: unknown): Promise<Seal> => ({ from: 6, through: 6, draws: [] })),
    admissionState: jest.fn(async () => state()),
    admit: jest.fn(async () => ({ first: 101, last: 101, admittedAt: 0, expiresAt: 1, held: false })),
    activeRooms: jest.fn(async () => [room]),
    pause: jest.fn(async () => true),
    resume: jest.fn(async () => true),
    sealedThrough: jest.fn(async () => 6),
    draws: jest.fn(async () => []),
    drawnOrder: jest.fn(async () => null),
    drawOrderOnce: jest.fn(async (_: number, __: number, order: (ids: string[]) => Buffer) => order(['a'.repeat(24)])),
  };
  const config = Object.assign(new WaitingRoomConfig(), { admissionTickMs: 100 });
  const states = new QueueStates(
    repo as unknown as WaitingRoomRepository,
    config,
    new HttpConfig(),
    Object.assign(new DoorConfig(), { soldOutStaleMs: 100 }),
  );
  const board = { returnedAt: jest.fn((_: number) => returnedAt()) } as unknown as SoldOutBoardService;
  const admitter = new Admitter(config, repo as unknown as WaitingRoomRepository, states, new MetricsService(), board);
  return { admitter, repo, states };
}

describe('the admitter tick', () => {
  beforeEach(() => jest.useFakeTimers({ now: 1_000_000, doNotFake: ['nextTick', 'setImmediate'] }));
  afterEach(() => jest.useRealTimers());

  /** `ticks` steps of the room, one every 100 ms (the tick). */
  async function tick(admitter: Admitter, ticks: number, r: ActiveRoom = room) {
    for (let i = 0; i < ticks; i++) {
      await admitter.step(r);
      jest.advanceTimersByTime(100);
    }
  }

  it('reads a quiet room (people waiting, no admission due) once a second, not every tick, and makes no step there', async () => {
    const { admitter, repo } = admitterOver(() => viewOf({ unitsLeft: 0, outstanding: 0 }));
    await tick(admitter, 30);
    expect(repo.view.mock.calls.length).toBeGreaterThanOrEqual(3);
    expect(repo.view.mock.calls.length).toBeLessThanOrEqual(4);
    expect(repo.exclusively).not.toHaveBeenCalled();
  });

  it('reads a room with admissions due every tick and steps it, giving the repository the count the budget allows', async () => {
    const { admitter, repo } = admitterOver(() => viewOf({ unitsLeft: 10, outstanding: 2 }));
    await tick(admitter, 10);
    expect(repo.admit).toHaveBeenCalledTimes(10);
    // ceil(1.5 x 10) - 2 = 13 admissions due, 400 placed and waiting: 13.
    expect(repo.admit.mock.calls.map((c: unknown[]) => c[3])).toEqual(Array(10).fill(13));
    // Once to decide (the view read after the last batch is a tick old by then), once after the batch.
    expect(repo.view).toHaveBeenCalledTimes(20);
  });

  it('admits no further than the positions handed out', async () => {
    const { admitter, repo } = admitterOver(() => viewOf({ unitsLeft: 10, highWater: 104 }));
    await tick(admitter, 1);
    expect((repo.admit.mock.calls[0] as unknown[])[3]).toBe(4);
  });

  it('steps a quiet room within a second of a unit coming back through another process', async () => {
    let unitsLeft = 0;
    const { admitter, repo } = admitterOver(() => viewOf({ unitsLeft, outstanding: 0 }));
    await tick(admitter, 5);
    unitsLeft = 1;
    await tick(admitter, 10);
    expect(repo.admit).toHaveBeenCalled();
  });

  it('reads a quiet room at its next tick after this process returned units of it', async () => {
    let unitsLeft = 0;
    let returned = 0;
    const { admitter, repo } = admitterOver(
      () => viewOf({ unitsLeft, outstanding: 0 }),
      () => returned,
    );
    await tick(admitter, 3);
    unitsLeft = 1;
    returned = Date.now();
    await tick(admitter, 1);
    expect(repo.admit).toHaveBeenCalledTimes(1);
  });

  it('reads a quiet room at its next tick once one of its admissions has lapsed', async () => {
    const expiresAt = Date.now() + 250;
    let outstanding = 2;
    const { admitter, repo } = admitterOver(() =>
      viewOf({
        unitsLeft: 1,
        outstanding,
        live: outstanding ? [{ first: 1, last: 2, admittedAt: 0, expiresAt, held: false }] : [],
      }),
    );
    await tick(admitter, 2);
    outstanding = 0;
    const reads = repo.view.mock.calls.length;
    await tick(admitter, 1); // 200 ms in: the admissions still live, the view still holds
    expect(repo.view.mock.calls.length).toBe(reads);
    await tick(admitter, 1); // 300 ms in: lapsed
    expect(repo.admit).toHaveBeenCalledTimes(1);
  });

  it('reads a quiet room at its next tick after a join here, and seals the bucket the join fell in', async () => {
    let unsealed = false;
    const { admitter, repo, states } = admitterOver(() => viewOf({ unsealed, highWater: 100 }));
    await tick(admitter, 2);
    expect(repo.seal).not.toHaveBeenCalled();
    unsealed = true;
    states.noteJoin(7);
    await tick(admitter, 1);
    expect(repo.seal).toHaveBeenCalledTimes(1);
  });

  it('does not seal the pre-queue before the start, and seals it at the first tick after', async () => {
    const startsAt = Date.now() + 150;
    const { admitter, repo } = admitterOver(() => viewOf({ sealedThrough: -1, unsealed: true, preQueue: null }));
    await tick(admitter, 2, { ...room, startsAt });
    expect(repo.seal).not.toHaveBeenCalled();
    await tick(admitter, 1, { ...room, startsAt });
    expect(repo.seal).toHaveBeenCalledTimes(1);
  });

  it("commits a bucket's seal on its own before the admission step, and the pre-queue's with the first admission", async () => {
    const order: string[] = [];
    const { admitter, repo } = admitterOver(() => viewOf({ unsealed: true, unitsLeft: 10 }));
    repo.seal.mockImplementation(async (_: number, q?: unknown) => {
      order.push(q === undefined ? 'seal alone' : 'seal in the step');
      return { from: 6, through: 6, draws: [] };
    });
    repo.exclusively.mockImplementation(async (_: number, work: (q: unknown) => Promise<unknown>) => {
      order.push('step');
      return work(() => Promise.resolve([]));
    });
    await tick(admitter, 1);
    expect(order).toEqual(['seal alone', 'step']);

    order.length = 0;
    const opening = admitterOver(() => viewOf({ sealedThrough: -1, unsealed: true, preQueue: null, unitsLeft: 10 }));
    opening.repo.seal.mockImplementation(repo.seal.getMockImplementation());
    opening.repo.exclusively.mockImplementation(repo.exclusively.getMockImplementation());
    await tick(opening.admitter, 1);
    expect(order).toEqual(['step', 'seal in the step']);
    expect(opening.repo.admit).toHaveBeenCalledTimes(1);
  });

  it('draws the order of each bucket it sealed, for the other processes, without holding up its next tick', async () => {
    const { admitter, repo } = admitterOver(() => viewOf({ unsealed: true }));
    const seed = Buffer.alloc(32, 1);
    repo.seal.mockImplementationOnce(async () => ({
      from: 6,
      through: 9,
      draws: [{ bucket: 8, draw: 3, first: 501, tickets: 1, seed, drawnAt: Date.now(), keys: null }],
    }));
    await tick(admitter, 1);
    await jest.advanceTimersByTimeAsync(0);
    expect(repo.drawOrderOnce).toHaveBeenCalledWith(7, 8, expect.any(Function));
  });

  it("stops a sold-out room's admission clocks while admissions are live, and starts them again once units are back", async () => {
    let unitsLeft = 0;
    let pausedSince: number | null = null;
    const live = [{ first: 1, last: 2, admittedAt: 0, expiresAt: Date.now() + 10_000, held: true }];
    const { admitter, repo } = admitterOver(() => viewOf({ unitsLeft, outstanding: 2, live, pausedSince }));
    repo.pause.mockImplementation(async () => ((pausedSince = Date.now()), true));
    repo.resume.mockImplementation(async () => ((pausedSince = null), true));
    await tick(admitter, 1);
    expect(repo.pause).toHaveBeenCalledTimes(1);
    // Paused and quiet: nothing to do, and the batch's expiry passing is no lapse.
    await tick(admitter, 120);
    expect(repo.pause).toHaveBeenCalledTimes(1);
    expect(repo.resume).not.toHaveBeenCalled();
    expect(repo.view.mock.calls.length).toBeLessThanOrEqual(16);
    unitsLeft = 1;
    await tick(admitter, 11);
    expect(repo.resume).toHaveBeenCalledTimes(1);

    // Sold out with no admission live: nothing to pause.
    const none = admitterOver(() => viewOf({ unitsLeft: 0, outstanding: 0 }));
    await tick(none.admitter, 5);
    expect(none.repo.pause).not.toHaveBeenCalled();
  });

  it("ticks at a room's start, so the pre-queue's draw is made then and not up to a tick after it", async () => {
    const { admitter, repo } = admitterOver(() => viewOf({ sealedThrough: -1, unsealed: true, preQueue: null }));
    const startsAt = Date.now() + 130;
    repo.activeRooms.mockImplementation(async () => [{ ...room, startsAt }]);
    admitter.onModuleInit();
    try {
      await jest.advanceTimersByTimeAsync(100); // the first tick reads the rooms: this one starts in 30 ms
      expect(repo.seal).not.toHaveBeenCalled();
      await jest.advanceTimersByTimeAsync(31); // the start, 69 ms before the next tick would have been
      expect(repo.seal).toHaveBeenCalledTimes(1);
    } finally {
      await admitter.onModuleDestroy();
    }
  });

  it("ticks just after each of a room's buckets ends, so its joins are sealed at once", async () => {
    const { admitter, repo } = admitterOver(() => viewOf({}));
    repo.activeRooms.mockImplementation(async () => [{ ...room, bucketMs: 250 }]);
    await admitter.tick();
    // 1,000,000 is a multiple of 250: the next bucket ends in 250 ms, its tick 5 ms after.
    expect(admitter.nextTickInMs(1_000_000)).toBe(100);
    expect(admitter.nextTickInMs(1_000_180)).toBe(75);
  });
});
