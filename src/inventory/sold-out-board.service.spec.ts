// The sold-out board refuses from memory only what PostgreSQL showed sold out, and never for
// longer than SOLD_OUT_STALE_MS past the last poll that found the segment rows unchanged.
import { DoorConfig } from '../config/app-config';
import { BOARD_MAX_HOLDERS, SoldOutBoardService } from './sold-out-board.service';
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
    const { board, stock } = world({ remaining: 3, fingerprint: 'f1', holders: null });
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

  it('should offer the poll on its way when an entry has lapsed, and refuse again once it renewed the entry', async () => {
    const { board, stock } = world(soldOut);
    board.learn(P);
    await board.settled();
    let answer: (m: Map<number, PolledProduct>) => void = () => undefined;
    stock.fingerprints.mockImplementation(() => new Promise((resolve) => (answer = resolve)));
    jest.setSystemTime(1_000_000 + 30);
    const polling = board.poll();
    jest.setSystemTime(1_000_000 + STALE_MS + 1);
    expect(board.refusal(P, 'carol')).toBeNull();
    const renewal = board.renewal(P);
    expect(renewal).not.toBeNull();
    answer(new Map([[P, polled(0, 'f1')]]));
    await renewal;
    await polling;
    expect(board.refusal(P, 'carol')).toEqual({ kind: 'sold_out' });
    expect(board.renewal(P + 1)).toBeNull();
    board.onApplicationShutdown();
  });

  it('should not hold a product with more holders than the board may hold, and drop the oldest to make room', async () => {
    const many = (n: number, prefix: string): SoldOutSnapshot => ({
      remaining: 0,
      fingerprint: 'f1',
      holders: Array.from({ length: n }, (_, i): [string, number] => [`${prefix}${i}`, i + 1]),
    });
    const { board, stock } = world(many(BOARD_MAX_HOLDERS + 1, 'x'));
    board.learn(P);
    await board.settled();
    expect(board.holds(P)).toBe(false);
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
