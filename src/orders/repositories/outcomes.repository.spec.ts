// Settling a sale whose reply was lost, against a fake DataSource: what each finding in
// pg_stat_activity and the orders table answers, and the DB_TIMEOUT_MS bound.
import { DatabaseConfig, HttpConfig } from '../../config/app-config';
import { AlreadyOrderedError, OutcomeUnknownError, UnavailableError } from '../../common/domain-errors';
import { UncertainWrite } from '../order.types';
import { OutcomesRepository } from './outcomes.repository';

const refused = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });

function repo(query: jest.Mock) {
  const metrics = { dependencyErrors: { inc: jest.fn() } };
  return new OutcomesRepository(
    { query } as never,
    { timeoutMs: 300 } as DatabaseConfig,
    { retryAfterS: 2 } as HttpConfig,
    metrics as never,
  );
}
const order = (ageMs: number, segment = 3) => ({
  id: '41',
  product_id: 7,
  user_id: 'u1',
  quantity: 1,
  allocations: [{ segment, quantity: 1 }],
  created_at: new Date(),
  age_ms: ageMs,
});
const write = () =>
  new UncertainWrite(7, 'u1', 1, [3], 'tag', process.hrtime.bigint() - 50_000_000n, new Error('lost'));

describe('OutcomesRepository', () => {
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
        .mockResolvedValueOnce([]);
      await expect(repo(query).settle(write())).rejects.toBeInstanceOf(UnavailableError);
    });

    it('should retry while PostgreSQL is away and settle once it answers', async () => {
      const query = jest
        .fn()
        .mockRejectedValueOnce(refused())
        .mockResolvedValueOnce([{ running: 0 }])
        .mockResolvedValueOnce([order(10)]);
      await expect(repo(query).settle(write())).resolves.toMatchObject({ id: 41 });
    });

    it('should answer OUTCOME_UNKNOWN when the write still runs or PostgreSQL stays away for DB_TIMEOUT_MS', async () => {
      for (const query of [jest.fn().mockResolvedValue([{ running: 1 }]), jest.fn().mockRejectedValue(refused())]) {
        const started = Date.now();
        const err = await repo(query)
          .settle(write())
          .catch((e: unknown) => e);
        expect(err).toBeInstanceOf(OutcomeUnknownError);
        expect((err as OutcomeUnknownError).retryAfterS).toBe(2);
        expect(Date.now() - started).toBeGreaterThanOrEqual(290);
      }
    });

    it('should give up at DB_TIMEOUT_MS on a lookup that hangs', async () => {
      const started = Date.now();
      await expect(repo(jest.fn(() => new Promise(() => undefined))).settle(write())).rejects.toBeInstanceOf(
        OutcomeUnknownError,
      );
      expect(Date.now() - started).toBeLessThan(1000);
    });
  });
});
