import { DoorConfig, HttpConfig, WaitingRoomConfig } from '../config/app-config';
import { SoldOutBoardService } from '../inventory/sold-out-board.service';
import { MetricsService } from '../metrics/metrics.service';
import { Admitter } from './admitter';
import { QueueStates } from './queue-states';
import { ActiveRoom, AdmissionView, RoomRow, WaitingRoomRepository } from './waiting-room.repository';

const room: ActiveRoom = { productId: 7, startsAt: null, endsAt: null, admissionTtlS: 120 };
const roomRow = (preQueue: number | null): RoomRow => ({
  productId: 7,
  seed: Buffer.alloc(32),
  seedHash: 'h',
  preQueue,
  highWater: 0,
  admittedThrough: 0,
});
const viewOf = (over: Partial<AdmissionView>): AdmissionView => ({
  preQueue: 0,
  preJoined: 0,
  highWater: 500,
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
function admitterOver(view: () => AdmissionView, rows: Array<RoomRow>, returnedAt = () => 0) {
  const repo = {
    room: jest.fn(async () => rows.shift() ?? roomRow(3)),
    view: jest.fn(async () => view()),
    exclusively: jest.fn(async (_: number, work: (r: RoomRow, q: unknown) => Promise<unknown>) =>
      work(roomRow(3), null),
    ),
    admit: jest.fn(async () => ({
      batch: { first: 101, last: 101, admittedAt: 0, expiresAt: 1 },
      unitsLeft: 1,
      outstandingBefore: 0,
    })),
    draw: jest.fn(async () => 3),
    activeRooms: jest.fn(async () => [room]),
    pause: jest.fn(async () => true),
    resume: jest.fn(async () => true),
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
  async function tick(admitter: Admitter, ticks: number) {
    for (let i = 0; i < ticks; i++) {
      await admitter.step(room);
      jest.advanceTimersByTime(100);
    }
  }

  it('reads a quiet room (people waiting, no admission due) once a second, not every tick, and makes no step there', async () => {
    const { admitter, repo } = admitterOver(() => viewOf({ unitsLeft: 0, outstanding: 0 }), []);
    await tick(admitter, 30);
    expect(repo.view.mock.calls.length).toBeGreaterThanOrEqual(3);
    expect(repo.view.mock.calls.length).toBeLessThanOrEqual(4);
    expect(repo.exclusively).not.toHaveBeenCalled();
  });

  it('reads a room with admissions due every tick and steps it, reading the view again after each batch', async () => {
    const { admitter, repo } = admitterOver(() => viewOf({ unitsLeft: 10, outstanding: 2 }), []);
    await tick(admitter, 10);
    expect(repo.admit).toHaveBeenCalledTimes(10);
    // Once to decide (the view read after the last batch is a tick old by then), once after the batch.
    expect(repo.view).toHaveBeenCalledTimes(20);
  });

  it('steps a quiet room within a second of a unit coming back through another process', async () => {
    let unitsLeft = 0;
    const { admitter, repo } = admitterOver(() => viewOf({ unitsLeft, outstanding: 0 }), []);
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
      [],
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
    const { admitter, repo } = admitterOver(
      () =>
        viewOf({
          unitsLeft: 1,
          outstanding,
          live: outstanding ? [{ first: 1, last: 2, admittedAt: 0, expiresAt }] : [],
        }),
      [],
    );
    await tick(admitter, 2);
    outstanding = 0;
    const reads = repo.view.mock.calls.length;
    await tick(admitter, 1); // 200 ms in: the admissions still live, the view still holds
    expect(repo.view.mock.calls.length).toBe(reads);
    await tick(admitter, 1); // 300 ms in: lapsed
    expect(repo.admit).toHaveBeenCalledTimes(1);
  });

  it('reads a quiet room with room in the budget at its next tick after a join here, but not one whose budget is spent', async () => {
    let highWater = 100;
    const { admitter, repo, states } = admitterOver(() => viewOf({ highWater, unitsLeft: 10, outstanding: 0 }), []);
    await tick(admitter, 2);
    expect(repo.admit).not.toHaveBeenCalled();
    highWater = 101;
    states.noteJoin(7);
    await tick(admitter, 1);
    expect(repo.admit).toHaveBeenCalledTimes(1);

    // Outstanding admissions at the ratio: a join changes nothing, the room stays quiet.
    const spent = admitterOver(() => viewOf({ highWater: 101, unitsLeft: 10, outstanding: 15 }), []);
    await tick(spent.admitter, 2);
    const reads = spent.repo.view.mock.calls.length;
    spent.states.noteJoin(7);
    await tick(spent.admitter, 3);
    expect(spent.repo.view.mock.calls.length).toBe(reads);
  });

  it("stops a sold-out room's admission clocks while admissions are live, and starts them again once units are back", async () => {
    let unitsLeft = 0;
    let pausedSince: number | null = null;
    const live = [{ first: 1, last: 2, admittedAt: 0, expiresAt: Date.now() + 10_000 }];
    const { admitter, repo } = admitterOver(() => viewOf({ unitsLeft, outstanding: 2, live, pausedSince }), []);
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
    const none = admitterOver(() => viewOf({ unitsLeft: 0, outstanding: 0 }), []);
    await tick(none.admitter, 5);
    expect(none.repo.pause).not.toHaveBeenCalled();
  });

  it('learns that another process drew the pre-queue from one read of the room, and does not try the draw again', async () => {
    const { admitter, repo } = admitterOver(() => viewOf({}), [roomRow(null), roomRow(3)]);
    await tick(admitter, 10);
    expect(repo.exclusively).toHaveBeenCalledTimes(1);
    expect(repo.draw).not.toHaveBeenCalled();
    expect(repo.room).toHaveBeenCalledTimes(2);
  });

  it("ticks at a room's start, so the draw is made then and not up to a tick after it", async () => {
    const { admitter, repo } = admitterOver(() => viewOf({}), [roomRow(null)]);
    const startsAt = Date.now() + 130;
    repo.activeRooms.mockImplementation(async () => [{ ...room, startsAt }]);
    repo.exclusively.mockImplementation(async (_: number, work: (r: RoomRow, q: unknown) => Promise<unknown>) =>
      work(roomRow(null), null),
    );
    admitter.onModuleInit();
    try {
      await jest.advanceTimersByTimeAsync(100); // the first tick reads the rooms: this one starts in 30 ms
      expect(repo.draw).not.toHaveBeenCalled();
      await jest.advanceTimersByTimeAsync(31); // the start, 69 ms before the next tick would have been
      expect(repo.draw).toHaveBeenCalledTimes(1);
    } finally {
      await admitter.onModuleDestroy();
    }
  });
});
