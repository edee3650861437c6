// The sold-out board refuses from memory only what PostgreSQL showed sold out, and never for
// longer than SOLD_OUT_STALE_MS past the last poll that found the segment rows unchanged.
import { DoorConfig } from '../config/app-config';
import { BOARD_MAX_HOLDERS, POLL_TIMEOUT_MS, SoldOutBoardService } from './sold-out-board.service';
import { ProductCatalogService } from './product-catalog.service';
import { ProductInfo } from './product.types';
import { PolledProduct, SoldOutSnapshot, StockRepository } from './stock.repository';

const STALE_MS = 100;
const P = 7;

function world(snapshot: SoldOutSnapshot | null) {
  const stock: jest.Mocked<Pick<StockRepository, 'soldOutSnapshot' | 'fingerprints'>> = {
    soldOutSnapshot: jest.fn(async (_productId: number) => snapshot),
    fingerprints: jest.fn(
      async (_ids: number[]): Promise<Map<number, PolledProduct>> => new Map([[P, polled(0, 'f1')]]),
    ),
  };
  const catalog = { remember: jest.fn((info: ProductInfo) => info) };
  const metrics = { soldOutBoardProducts: { set: jest.fn() } };
  const door = Object.assign(new DoorConfig(), { soldOutStaleMs: STALE_MS });
  const board = new SoldOutBoardService(
    stock as unknown as StockRepository,
    catalog as unknown as ProductCatalogService,
    door,
    metrics as never,
  );
  return { board, stock, catalog };
}

const terms: ProductInfo = {
  id: P,
  name: 'Sneaker',
  limitPerUser: 1,
  segmentCount: 2,
  layoutVersion: 1,
  startsAt: null,
  endsAt: null,
  waitingRoom: false,
  admissionTtlS: 120,
};
const polled = (remaining: number, fingerprint: string): PolledProduct => ({ remaining, fingerprint, terms });

const soldOut: SoldOutSnapshot = {
  remaining: 0,
  fingerprint: 'f1',
  layoutVersion: 1,
  withStock: [],
  holders: [
    ['alice', 11],
    ['bob', 12],
  ],
};

beforeEach(() => jest.useFakeTimers({ now: 1_000_000 }));
afterEach(() => jest.useRealTimers());

describe('SoldOutBoardService', () => {
  it('should refuse from memory once PostgreSQL showed the product sold out, with the holder its orderId', async () => {
    const { board } = world(soldOut);
    expect(board.refusal(P, 'carol')).toBeNull();
    board.learn(P);
    await board.settled();
    expect(board.refusal(P, 'carol')).toEqual({ kind: 'sold_out' });
    expect(board.refusal(P, 'alice')).toEqual({ kind: 'already_ordered', orderId: 11 });
    expect(board.refusal(P + 1, 'carol')).toBeNull();
    board.onApplicationShutdown();
  });

  it('should not remember a product that PostgreSQL shows with units left', async () => {
    const { board, stock } = world({
      remaining: 3,
      fingerprint: 'f1',
      holders: null,
      layoutVersion: 1,
      withStock: [0],
    });
    board.learn(P);
    await board.settled();
    expect(board.refusal(P, 'carol')).toBeNull();
    // and does not ask again at once: a stale sold-out flag elsewhere costs at most one read per half bound
    board.learn(P);
    await board.settled();
    expect(stock.soldOutSnapshot).toHaveBeenCalledTimes(1);
  });

  it('should read PostgreSQL once for many concurrent sold-out answers', async () => {
    const { board, stock } = world(soldOut);
    for (let i = 0; i < 50; i++) board.learn(P);
    await board.settled();
    expect(stock.soldOutSnapshot).toHaveBeenCalledTimes(1);
    board.onApplicationShutdown();
  });

  it('should stop refusing SOLD_OUT_STALE_MS after learning when no poll confirms it', async () => {
    const { board, stock } = world(soldOut);
    stock.fingerprints.mockRejectedValue(new Error('PostgreSQL is down'));
    board.learn(P);
    await board.settled();
    jest.setSystemTime(1_000_000 + STALE_MS - 1);
    expect(board.refusal(P, 'carol')).toEqual({ kind: 'sold_out' });
    await board.poll();
    jest.setSystemTime(1_000_000 + STALE_MS);
    expect(board.refusal(P, 'carol')).toBeNull();
    board.onApplicationShutdown();
  });

  it("should keep refusing while polls find the segment rows unchanged, keeping the product's terms fresh", async () => {
    const { board, catalog } = world(soldOut);
    board.learn(P);
    await board.settled();
    for (let t = 50; t <= 500; t += 50) {
      jest.setSystemTime(1_000_000 + t);
      await board.poll();
    }
    jest.setSystemTime(1_000_000 + 500 + STALE_MS - 1);
    expect(board.refusal(P, 'carol')).toEqual({ kind: 'sold_out' });
    expect(catalog.remember).toHaveBeenCalledTimes(10);
    expect(catalog.remember).toHaveBeenCalledWith(terms);
    board.onApplicationShutdown();
  });

  it.each([
    ['units came back', polled(1, 'f2')],
    ['a segment row was written though nothing remains (a return resold)', polled(0, 'f2')],
  ])('should forget the product at the first poll after %s', async (_name, seen) => {
    const { board, stock } = world(soldOut);
    board.learn(P);
    await board.settled();
    stock.fingerprints.mockResolvedValue(new Map([[P, seen]]));
    await board.poll();
    expect(board.refusal(P, 'carol')).toBeNull();
  });

  it('should forget the product at the first poll after its segments are gone', async () => {
    const { board, stock } = world(soldOut);
    board.learn(P);
    await board.settled();
    stock.fingerprints.mockResolvedValue(new Map());
    await board.poll();
    expect(board.refusal(P, 'carol')).toBeNull();
  });

  it('should answer a lapsed entry from a poll sent after the request, however late its answer is handled', async () => {
    const { board, stock } = world(soldOut);
    board.learn(P);
    await board.settled();
    let answer: (m: Map<number, PolledProduct>) => void = () => undefined;
    stock.fingerprints.mockImplementation(() => new Promise((resolve) => (answer = resolve)));
    jest.setSystemTime(1_000_000 + STALE_MS + 1);
    expect(board.refusal(P, 'carol')).toBeNull();
    const carol = board.confirmed(P, 'carol');
    const alice = board.confirmed(P, 'alice');
    // The loop lags: the answer is handled ten bounds after the poll was sent.
    jest.setSystemTime(1_000_000 + 11 * STALE_MS);
    answer(new Map([[P, polled(0, 'f1')]]));
    expect(await carol).toEqual({ kind: 'sold_out' });
    expect(await alice).toEqual({ kind: 'already_ordered', orderId: 11 });
    expect(stock.fingerprints).toHaveBeenCalledTimes(1);
    board.onApplicationShutdown();
  });

  it('should not answer a request from a poll sent before it came, but from the next one, shared by every request waiting', async () => {
    const { board, stock } = world(soldOut);
    board.learn(P);
    await board.settled();
    const answers: Array<(m: Map<number, PolledProduct>) => void> = [];
    stock.fingerprints.mockImplementation(() => new Promise((resolve) => answers.push(resolve)));
    jest.setSystemTime(1_000_000 + 30);
    const early = board.poll();
    jest.setSystemTime(1_000_000 + STALE_MS + 40);
    const waiting = Array.from({ length: 50 }, (_, i) => board.confirmed(P, `buyer${i}`));
    // The early poll saw the rows before a unit came back; the next one sees the return.
    answers[0](new Map([[P, polled(0, 'f1')]]));
    await early;
    await jest.advanceTimersByTimeAsync(0);
    expect(stock.fingerprints).toHaveBeenCalledTimes(2);
    answers[1](new Map([[P, polled(1, 'f2')]]));
    expect(new Set((await Promise.all(waiting)).map((a) => a.kind))).toEqual(new Set(['changed']));
    expect(stock.fingerprints).toHaveBeenCalledTimes(2);
    expect(board.holds(P)).toBe(false);
  });

  it('should tell the requests waiting on a poll that failed that it cannot be sure', async () => {
    const { board, stock } = world(soldOut);
    board.learn(P);
    await board.settled();
    stock.fingerprints.mockRejectedValue(new Error('PostgreSQL is down'));
    jest.setSystemTime(1_000_000 + STALE_MS + 1);
    expect(await board.confirmed(P, 'carol')).toEqual({ kind: 'unsure' });
    expect(board.holds(P)).toBe(true);
    board.onApplicationShutdown();
  });

  it(`should tell the requests waiting on a poll unanswered after ${POLL_TIMEOUT_MS} ms that it cannot be sure, and take a late answer for the next`, async () => {
    const { board, stock } = world(soldOut);
    board.learn(P);
    await board.settled();
    const answers: Array<(m: Map<number, PolledProduct>) => void> = [];
    stock.fingerprints.mockImplementation(() => new Promise((resolve) => answers.push(resolve)));
    jest.setSystemTime(1_000_000 + STALE_MS + 1);
    const waiting = board.confirmed(P, 'carol');
    await jest.advanceTimersByTimeAsync(POLL_TIMEOUT_MS + 1);
    expect(await waiting).toEqual({ kind: 'unsure' });
    const next = board.confirmed(P, 'carol');
    answers[1](new Map([[P, polled(0, 'f1')]]));
    expect(await next).toEqual({ kind: 'sold_out' });
    board.onApplicationShutdown();
  });

  it('should answer the orders that found a product sold out from one read sent after they began, with each holder its order', async () => {
    const { board, stock } = world(soldOut);
    let answer: (s: SoldOutSnapshot) => void = () => undefined;
    stock.soldOutSnapshot.mockImplementation(() => new Promise((resolve) => (answer = resolve)));
    // A read already on its way was sent before these orders began: they wait for the next one.
    board.learn(P);
    jest.setSystemTime(1_000_000 + 5);
    const asked = Date.now();
    const carol = board.soldOutFor(P, 'carol', asked);
    const bob = board.soldOutFor(P, 'bob', asked);
    answer({ ...soldOut, holders: [['alice', 11]] });
    await jest.advanceTimersByTimeAsync(0);
    expect(stock.soldOutSnapshot).toHaveBeenCalledTimes(2);
    answer(soldOut);
    expect(await carol).toEqual({ kind: 'sold_out' });
    expect(await bob).toEqual({ kind: 'already_ordered', orderId: 12 });
    expect(stock.soldOutSnapshot).toHaveBeenCalledTimes(2);
    // The entry that read made answers the door at once.
    expect(board.refusal(P, 'dave')).toEqual({ kind: 'sold_out' });
    board.onApplicationShutdown();
  });

  it('should answer with the layout a read found with units left, or with the error a read failed with', async () => {
    const { board, stock } = world({
      remaining: 5,
      fingerprint: 'f1',
      holders: null,
      layoutVersion: 3,
      withStock: [0, 2],
    });
    expect(await board.soldOutFor(P, 'carol', Date.now())).toEqual({
      kind: 'units_left',
      remaining: 5,
      layoutVersion: 3,
      withStock: [0, 2],
    });
    const down = new Error('PostgreSQL is down');
    stock.soldOutSnapshot.mockRejectedValue(down);
    jest.setSystemTime(1_000_000 + 10);
    expect(await board.soldOutFor(P, 'carol', Date.now())).toEqual({ kind: 'failed', error: down });
    expect(board.holds(P)).toBe(false);
  });

  it('should not hold a product with more holders than the board may hold, and drop the oldest to make room', async () => {
    const many = (n: number, prefix: string): SoldOutSnapshot => ({
      remaining: 0,
      fingerprint: 'f1',
      layoutVersion: 1,
      withStock: [],
      holders: Array.from({ length: n }, (_, i): [string, number] => [`${prefix}${i}`, i + 1]),
    });
    const { board, stock } = world(many(BOARD_MAX_HOLDERS + 1, 'x'));
    board.learn(P);
    await board.settled();
    expect(board.holds(P)).toBe(false);
    // An order that found it sold out is told so, and looks its buyer up itself.
    jest.setSystemTime(1_000_000 + 1);
    expect(await board.soldOutFor(P, 'x1', Date.now())).toEqual({ kind: 'nothing_left' });
    stock.soldOutSnapshot.mockResolvedValueOnce(many(BOARD_MAX_HOLDERS - 10, 'a')).mockResolvedValueOnce(many(20, 'b'));
    board.learn(P + 1);
    await board.settled();
    board.learn(P + 2);
    await board.settled();
    expect([board.holds(P + 1), board.holds(P + 2)]).toEqual([false, true]);
    board.onApplicationShutdown();
  });

  it('should forget at once when this process returns units, and say when it last did (the admitter asks)', async () => {
    const { board } = world(soldOut);
    board.learn(P);
    await board.settled();
    expect(board.returnedAt(P)).toBe(0);
    const before = Date.now();
    board.forget(P);
    expect(board.refusal(P, 'alice')).toBeNull();
    expect(board.returnedAt(P)).toBeGreaterThanOrEqual(before);
    expect(board.returnedAt(P + 1)).toBe(0);
  });
});
