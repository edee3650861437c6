// The waiting room on a 3-master Redis Cluster with two service processes: a master is killed with
// SIGKILL mid-queue, then restarted empty. What docs/waiting-room.md promises: the queue lives in
// PostgreSQL and every buyer carries a signed ticket, so no place changes and nobody is told to join
// again; polls go on answering while the master is away (an order that needs it may be 503 and is
// retried); no position is handed out twice or left a gap; nothing is oversold, no position is
// admitted to two users, and no order is placed without an admission.
import { waitFor } from '../support/wait';
import { expectStockBalanced, withDb } from '../support/database';
import { admin, request } from '../support/service';
import { expectAdmissionsKept, newBuyer, runCrowd, saleState, saleWatch } from '../support/waiting-room';
import { ClusterSale, startClusterSale } from './support';

const UNITS = 60;
const USERS = 300;

describe('the waiting room on a Redis Cluster, one master killed mid-queue, across two service processes', () => {
  let sale: ClusterSale;

  beforeAll(async () => {
    sale = await startClusterSale({ ADMISSION_TICK_MS: '50', ADMISSION_RATIO: '1.5', LOG_LEVEL: 'error' });
  });
  afterAll(async () => {
    await sale?.stop();
  });

  it('keeps every place while a master is lost and comes back empty, and keeps I8 and I1', async () => {
    const urls = [sale.a.url, sale.b.url];
    const created = await request(
      sale.a.url,
      'POST',
      '/admin/products',
      { name: 'queued on a cluster', stock: UNITS, segments: 6, waitingRoom: true, admissionTtlS: 10 },
      admin,
    );
    expect(created.status).toBe(201);
    const productId: number = created.body.id;
    const buyers = Array.from({ length: USERS }, (_, i) => newBuyer(`cq-${i}`, 'pay'));
    await Promise.all(
      buyers.map(async (buyer, i) => {
        const r = await request(urls[i % 2], 'POST', `/products/${productId}/queue`, { userId: buyer.userId });
        expect(r.status).toBe(201);
        buyer.ticketId = r.body.id;
      }),
    );

    const state = () => saleState(productId, withDb);
    const settling = saleWatch(state);
    const crowd = runCrowd({
      urls,
      productId,
      buyers,
      inFlight: 24,
      finished: settling.settled,
    });
    await waitFor('a third of the units ordered', async () => (await state()).orders >= UNITS / 3, 60_000, 200);
    const dead = sale.cluster.nodes[1];
    const polls = () => buyers.reduce((n, x) => n + x.polls, 0);
    const pollsBefore = polls();
    dead.kill('SIGKILL');
    // The crowd goes on polling while the master is away: a hundred answers (or the sale's end) before it is back.
    await waitFor(
      'polls answered while the master is away',
      () => polls() >= pollsBefore + 100 || settling.settled(),
      60_000,
      100,
    );
    await dead.restart();
    await sale.cluster.waitUntilAgreed();
    const watching = settling.watch();
    await crowd;
    await watching;

    // No poll was refused: the queue had nothing on the lost master. Each buyer saw one place, and
    // the places are 1..USERS, each once.
    expect(buyers.flatMap((x) => [...x.refusals.keys()])).toEqual([]);
    for (const x of buyers) expect({ user: x.userId, places: x.positions.size }).toEqual({ user: x.userId, places: 1 });
    const places = buyers.map((x) => [...x.positions][0]).sort((p, q) => p - q);
    expect(places).toEqual(Array.from({ length: USERS }, (_, i) => i + 1));
    // I8 and I1 in PostgreSQL.
    const { orders } = await expectAdmissionsKept(productId, 1.5, buyers, withDb);
    expect(orders.filter((o) => o.status === 'paid')).toHaveLength(UNITS);
    await expectStockBalanced(productId, UNITS);
  }, 480_000);
});
