// Settling a sale whose reply was lost, against a fake DataSource: what each finding in
// pg_stat_activity and the orders table answers, and the DB_TIMEOUT_MS bound, on jest's fake clock
// (the retry pause and the bound are timers; a busy machine must not decide them).
import { DatabaseConfig, HttpConfig } from '../../config/app-config';
import { AlreadyOrderedError, OutcomeUnknownError, UnavailableError } from '../../common/domain-errors';
import { UncertainWrite } from '../order.types';
import { OutcomesRepository } from './outcomes.repository';

// The repository pauses with node:timers/promises, which jest's fake timers leave real: route it
// through the global setTimeout, which they replace.
jest.mock('node:timers/promises', () => ({
  ...jest.requireActual<object>('node:timers/promises'),
  setTimeout: (ms: number, value?: unknown) => new Promise((resolve) => setTimeout(() => resolve(value), ms)),
}));

const DB_TIMEOUT_MS = 300;
const refused = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });

function repo(query: jest.Mock) {
  const metrics = { dependencyErrors: { inc: jest.fn() } };
  return new OutcomesRepository(
    { query } as never,
    { timeoutMs: DB_TIMEOUT_MS } as DatabaseConfig,
    { retryAfterS: 2 } as HttpConfig,
    metrics as never,
  );
}
const order = (ageMs: number, segment = 3, status = 'reserved') => ({
  id: '41',
  product_id: 7,
  user_id: 'u1',
  quantity: 1,
  allocations: [{ segment, quantity: 1 }],
  status,
  created_at: new Date(),
  age_ms: ageMs,
});
const write = () =>
  new UncertainWrite(7, 'u1', 1, [3], 'tag', process.hrtime.bigint() - 50_000_000n, new Error('lost'));

/** Reads a promise's end without awaiting it: 'pending', the value, or the error it failed with. */
function settledOutcome(p: Promise<unknown>): () => unknown {
  let outcome: unknown = 'pending';
  p.then(
    (v) => (outcome = v),
    (e: unknown) => (outcome = e),
  );
  return () => outcome;
}

describe('OutcomesRepository', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  describe('settle', () => {
    it('should answer the order when one created since the write was sent exists', async () => {
      const query = jest
        .fn()
        .mockResolvedValueOnce([{ running: 0 }])
        .mockResolvedValueOnce([order(10)]);
      await expect(repo(query).settle(write())).resolves.toMatchObject({ id: 41, userId: 'u1' });
    });

    it('should answer ALREADY_ORDERED with its id for an order older than the write', async () => {
      const query = jest
        .fn()
        .mockResolvedValueOnce([{ running: 0 }])
        .mockResolvedValueOnce([order(60_000)]);
      const err = await repo(query)
        .settle(write())
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(AlreadyOrderedError);
      expect((err as AlreadyOrderedError).orderId).toBe(41);
    });

    it('should answer UNAVAILABLE when nothing of the write runs any more and no order exists', async () => {
      const query = jest
        .fn()
        .mockResolvedValueOnce([{ running: 0 }])
        .mockResolvedValueOnce([])
        .mockResolvedValueOnce([]);
      await expect(repo(query).settle(write())).rejects.toBeInstanceOf(UnavailableError);
    });

    it('should answer the order as it is now when the write made it and it ended before the outcome was read (expired)', async () => {
      const query = jest
        .fn()
        .mockResolvedValueOnce([{ running: 0 }])
        .mockResolvedValueOnce([])
        .mockResolvedValueOnce([order(10, 3, 'expired')]);
      await expect(repo(query).settle(write())).resolves.toMatchObject({ id: 41, status: 'expired' });
      // The ended order is looked for only among those made since the write was sent.
      expect(query.mock.calls[2][1]).toEqual([7, 'u1', expect.any(Number)]);
      expect(query.mock.calls[2][1][2]).toBeGreaterThanOrEqual(50);
    });

    it('should answer UNAVAILABLE, not ALREADY_ORDERED, for an ended order older than the write', async () => {
      const query = jest
        .fn()
        .mockResolvedValueOnce([{ running: 0 }])
        .mockResolvedValueOnce([])
        .mockResolvedValueOnce([order(60_000, 3, 'cancelled')]);
      await expect(repo(query).settle(write())).rejects.toBeInstanceOf(UnavailableError);
    });

    it('should retry while PostgreSQL is away and settle once it answers', async () => {
      const query = jest
        .fn()
        .mockRejectedValueOnce(refused())
        .mockResolvedValueOnce([{ running: 0 }])
        .mockResolvedValueOnce([order(10)]);
      const settled = repo(query).settle(write());
      // The first lookup failed; the next comes after the retry pause, well inside the bound.
      await jest.advanceTimersByTimeAsync(0);
      expect(query).toHaveBeenCalledTimes(1);
      await jest.advanceTimersByTimeAsync(100);
      await expect(settled).resolves.toMatchObject({ id: 41 });
      expect(query).toHaveBeenCalledTimes(3);
    });

    it('should answer OUTCOME_UNKNOWN when the write still runs or PostgreSQL stays away for DB_TIMEOUT_MS', async () => {
      for (const query of [jest.fn().mockResolvedValue([{ running: 1 }]), jest.fn().mockRejectedValue(refused())]) {
        const outcome = settledOutcome(repo(query).settle(write()));
        await jest.advanceTimersByTimeAsync(DB_TIMEOUT_MS - 1);
        // Still asking just before the bound, every retry pause apart.
        expect(outcome()).toBe('pending');
        expect(query.mock.calls.length).toBeGreaterThanOrEqual(3);
        await jest.advanceTimersByTimeAsync(2);
        const err = outcome();
        expect(err).toBeInstanceOf(OutcomeUnknownError);
        expect((err as OutcomeUnknownError).retryAfterS).toBe(2);
      }
    });

    it('should give up at DB_TIMEOUT_MS on a lookup that hangs', async () => {
      const outcome = settledOutcome(repo(jest.fn(() => new Promise(() => undefined))).settle(write()));
      await jest.advanceTimersByTimeAsync(DB_TIMEOUT_MS - 1);
      expect(outcome()).toBe('pending');
      // The lookup's timer fires at the bound; the loop then sees the deadline passed.
      await jest.advanceTimersByTimeAsync(2);
      expect(outcome()).toBeInstanceOf(OutcomeUnknownError);
    });
  });
});
