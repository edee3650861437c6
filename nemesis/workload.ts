// A sale's whole life, as clients see it: buyers ordering two products, one without and one with a
// waiting room (join, poll, order with the admission; proof of work off), then paying, cancelling
// or letting the reservation expire, re-reading their orders; an operator restocking, rebalancing
// and pausing the sale (its end set to now, then lifted). Each buyer draws from a random stream of
// its own. After the faults, closing buyers order and pay until the sale sells out.
import { setTimeout as sleep } from 'node:timers/promises';
import { Answer, Client, Node, pick } from './client';
import { Rng } from './rng';

export interface Tokens {
  admin: string;
  shop: string;
}

export interface Product {
  id: number;
  room: boolean;
  limit: number;
}

export interface SaleShape {
  buyers: number;
  users: number;
  paymentTimeoutS: number;
  products: Array<{ name: string; stock: number; segments: number; waitingRoom: boolean; limitPerUser: number }>;
}

const keepOrder = (b: any) =>
  pick(b, ['id', 'productId', 'userId', 'quantity', 'status', 'allocations', 'expiresAt', 'createdAt', 'paidAt']);
const keepTicket = (b: any) => ({ ...pick(b, ['status', 'position', 'ahead']), admitted: !!b?.admission });
const keepProduct = (b: any) => pick(b, ['id', 'stocked', 'stock', 'segmentCount']);

const REQUEST_MS = 8000;

export class Workload {
  products: Product[] = [];
  private running = false;
  private readonly loops: Array<Promise<void>> = [];

  constructor(
    private readonly client: Client,
    private readonly nodes: () => Node[],
    private readonly tokens: Tokens,
    private readonly rng: Rng,
    private readonly shape: SaleShape,
  ) {}

  /** Creates the products (retried until the world answers). */
  async setup(): Promise<Product[]> {
    for (const p of this.shape.products) {
      for (;;) {
        const r = await this.client.call(
          'operator',
          'create',
          this.nodes()[0],
          'POST',
          '/admin/products',
          {
            name: p.name,
            stock: p.stock,
            segments: p.segments,
            limitPerUser: p.limitPerUser,
            paymentTimeoutS: this.shape.paymentTimeoutS,
            waitingRoom: p.waitingRoom,
            ...(p.waitingRoom ? { admissionTtlS: 10 } : {}),
          },
          { name: p.name },
          { auth: this.tokens.admin, keep: keepProduct },
        );
        if (r.outcome === 'ok') {
          this.products.push({ id: Number(r.body.id), room: p.waitingRoom, limit: p.limitPerUser });
          break;
        }
        await sleep(500);
      }
    }
    return this.products;
  }

  /** Starts the buyers and the operator; they run until stop(). */
  start(): void {
    this.running = true;
    for (let k = 0; k < this.shape.buyers; k++) {
      const rng = this.rng.fork(`buyer-${k}`);
      this.loops.push(this.loop(() => this.buyerTurn(`buyer-${k}`, rng)));
    }
    const op = this.rng.fork('operator');
    this.loops.push(this.loop(() => this.operatorTurn(op)));
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops.splice(0));
  }

  private async loop(turn: () => Promise<void>): Promise<void> {
    while (this.running) {
      try {
        await turn();
      } catch (err) {
        // A bug of the workload itself: said, not hidden.
        process.stderr.write(`nemesis: workload step failed: ${(err as Error).stack ?? String(err)}\n`);
        await sleep(200);
      }
    }
  }

  private node(rng: Rng): Node {
    return rng.pick(this.nodes());
  }

  private async buyerTurn(proc: string, rng: Rng): Promise<void> {
    const product = rng.chance(0.55) ? this.products[0] : this.products[1];
    const user = `u${rng.int(1, this.shape.users)}`;
    const quantity = product.limit > 1 && rng.chance(0.2) ? 2 : 1;
    let admission: string | undefined;
    if (product.room) {
      admission = await this.admitted(proc, rng, product, user, 15_000);
      if (!admission) return;
    }
    const placed = await this.order(proc, rng, product, user, quantity, admission);
    if (placed.outcome === 'ok') await this.fate(proc, rng, Number(placed.body.id), user);
    else if (placed.code === 'ALREADY_ORDERED' && placed.body?.orderId && rng.chance(0.3))
      await this.read(proc, rng, Number(placed.body.orderId));
    await sleep(rng.int(20, 300));
  }

  order(proc: string, rng: Rng, product: Product, user: string, quantity: number, admission?: string): Promise<Answer> {
    return this.client.call(
      proc,
      'order',
      this.node(rng),
      'POST',
      '/orders',
      { userId: user, productId: product.id, quantity, ...(admission ? { admission } : {}) },
      { userId: user, productId: product.id, quantity, admission: !!admission },
      { timeoutMs: REQUEST_MS, keep: keepOrder },
    );
  }

  /** Joins the product's queue and polls until admitted (the admission), or gives up after `budgetMs`. */
  async admitted(
    proc: string,
    rng: Rng,
    product: Product,
    user: string,
    budgetMs: number,
    /** Polling stops once this says the ticket is no longer wanted (its product sold out meanwhile). */
    wanted: () => boolean = () => true,
  ): Promise<string | undefined> {
    const joined = await this.client.call(
      proc,
      'join',
      this.node(rng),
      'POST',
      `/products/${product.id}/queue`,
      { userId: user },
      { userId: user, productId: product.id },
      { timeoutMs: REQUEST_MS, keep: keepTicket },
    );
    if (joined.outcome !== 'ok') return undefined;
    const ticket = String(joined.body.id);
    let last: Answer = joined;
    const until = Date.now() + budgetMs;
    while (Date.now() < until && wanted()) {
      const status = last.outcome === 'ok' ? String(last.body.status) : undefined;
      if (status === 'admitted' && last.body.admission) return String(last.body.admission);
      if (status === 'ordered' || status === 'ended') return undefined;
      const retry = Number(last.headers['retry-after'] ?? 1);
      await sleep(Math.min(1500, Math.max(150, (Number.isFinite(retry) ? retry : 1) * 1000)));
      last = await this.client.call(
        proc,
        'poll',
        this.node(rng),
        'GET',
        `/products/${product.id}/queue/${encodeURIComponent(ticket)}`,
        undefined,
        { userId: user, productId: product.id },
        { timeoutMs: REQUEST_MS, keep: keepTicket },
      );
      if (last.outcome === 'refused' && last.status === 404) return undefined;
    }
    return undefined;
  }

  /** What the buyer does with a reservation: pay, cancel or leave it to expire, now or a little later. */
  private async fate(proc: string, rng: Rng, orderId: number, user: string): Promise<void> {
    const fate = rng.weighted({ pay: 55, cancel: 20, leave: 25 });
    // Now and then late enough to race the reservation's end.
    await sleep(rng.chance(0.1) ? rng.int(3000, 7000) : rng.int(0, 1500));
    if (fate === 'pay') await this.pay(proc, rng, orderId, user, 2);
    if (fate === 'cancel') {
      await this.change(proc, rng, 'cancel', orderId, user, 2);
      // Now and then the shop sends it twice (a second click): again 200, nothing more returned.
      if (rng.chance(0.15)) await this.change(proc, rng, 'cancel', orderId, user, 1);
    }
    if (rng.chance(0.3)) await this.read(proc, rng, orderId);
  }

  /** Pays, once more after an answer that leaves the outcome open or says nothing happened (as a shop retries). */
  pay(proc: string, rng: Rng, orderId: number, user: string, tries: number): Promise<Answer> {
    return this.change(proc, rng, 'pay', orderId, user, tries);
  }

  private async change(
    proc: string,
    rng: Rng,
    what: 'pay' | 'cancel',
    orderId: number,
    user: string,
    tries: number,
  ): Promise<Answer> {
    for (let i = 1; ; i++) {
      const r = await this.client.call(
        proc,
        what,
        this.node(rng),
        'POST',
        `/orders/${orderId}/${what}`,
        { userId: user },
        { orderId, userId: user },
        { auth: this.tokens.shop, timeoutMs: REQUEST_MS, keep: keepOrder },
      );
      const retry = r.outcome === 'unknown' || r.outcome === 'failed' || r.status === 503;
      if (!retry || i >= tries) return r;
      await sleep(rng.int(300, 1200));
    }
  }

  private read(proc: string, rng: Rng, orderId: number): Promise<Answer> {
    return this.client.call(
      proc,
      'read',
      this.node(rng),
      'GET',
      `/orders/${orderId}`,
      undefined,
      { orderId },
      { auth: this.tokens.shop, timeoutMs: REQUEST_MS, keep: keepOrder },
    );
  }

  private async operatorTurn(rng: Rng): Promise<void> {
    await sleep(rng.int(2000, 6000));
    if (!this.running) return;
    const product = rng.pick(this.products);
    const action = rng.weighted({ restock: 40, rebalance: 35, pause: 25 });
    if (action === 'restock') {
      // Enough that the sale keeps selling between sell-outs: buyers take about five units a second.
      const units = rng.int(5, 30);
      await this.admin(
        'restock',
        rng,
        'POST',
        `/admin/products/${product.id}/restock`,
        { units },
        { productId: product.id, units },
      );
    } else if (action === 'rebalance') {
      const segments = rng.int(2, 10);
      await this.admin(
        'rebalance',
        rng,
        'POST',
        `/admin/products/${product.id}/rebalance`,
        { segments },
        { productId: product.id, segments },
      );
    } else {
      // The sale paused: its end set to now, lifted after a moment (retried until it is).
      const p = this.products[0];
      await this.admin(
        'pause',
        rng,
        'PATCH',
        `/admin/products/${p.id}`,
        { endsAt: new Date().toISOString() },
        { productId: p.id },
      );
      await sleep(rng.int(1000, 3000));
      await this.resume(rng, p);
    }
  }

  /** Lifts a pause: PATCH endsAt null until the service says it did. */
  async resume(rng: Rng, p: Product = this.products[0]): Promise<void> {
    for (;;) {
      const r = await this.admin(
        'resume',
        rng,
        'PATCH',
        `/admin/products/${p.id}`,
        { endsAt: null },
        { productId: p.id },
      );
      if (r.outcome === 'ok') return;
      await sleep(500);
    }
  }

  private admin(
    f: 'restock' | 'rebalance' | 'pause' | 'resume',
    rng: Rng,
    method: string,
    path: string,
    body: unknown,
    args: Record<string, unknown>,
  ): Promise<Answer> {
    return this.client.call('operator', f, this.node(rng), method, path, body, args, {
      auth: this.tokens.admin,
      timeoutMs: 15_000,
      keep: (b: any) => (f === 'rebalance' ? keepProduct(b?.after) : keepProduct(b)),
    });
  }

  /**
   * Closing buyers: fresh users who order one unit of a product that has units left and pay at
   * once (retrying what leaves the outcome open), until every product is sold out: `unsold` names
   * the products that still have units left or reserved (read from PostgreSQL).
   */
  async sellOut(buyers: number, unsold: () => Promise<number[]>, deadline: number): Promise<boolean> {
    let open = this.products.map((p) => p.id);
    const check = (async () => {
      while (open.length > 0 && Date.now() < deadline) {
        open = await unsold().catch(() => open);
        if (open.length > 0) await sleep(1000);
      }
    })();
    const loops = Array.from({ length: buyers }, async (_, k) => {
      const rng = this.rng.fork(`closer-${k}`);
      const proc = `closer-${k}`;
      for (let n = 0; open.length > 0 && Date.now() < deadline; n++) {
        const ids = [...open];
        if (ids.length === 0) break;
        const id = rng.pick(ids);
        const product = this.products.find((p) => p.id === id) as Product;
        const user = `c${k}-${n}`;
        let admission: string | undefined;
        if (product.room) {
          // A closer keeps its place until admitted: a ticket given up would be admitted later with
          // nobody to order, holding back the queue for an admission's lifetime (with one unit left,
          // two admissions at a time), and closers joining anew behind it would never catch up.
          admission = await this.admitted(proc, rng, product, user, deadline - Date.now(), () => open.includes(id));
          if (!admission) continue;
        }
        const placed = await this.order(proc, rng, product, user, 1, admission);
        if (placed.outcome === 'ok') await this.pay(proc, rng, Number(placed.body.id), user, 4);
        else await sleep(placed.code === 'SOLD_OUT' ? 500 : 100);
      }
    });
    await Promise.all([check, ...loops]);
    return open.length === 0;
  }
}
