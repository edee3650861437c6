/// <reference lib="dom" />
// (The callbacks of page.evaluate run in the browser, on its DOM.)
// The buyer's waiting page in a real browser (Debian's chromium, driven by playwright-core) against
// two service processes, with proof of work on: the page solves the challenge in Web Workers and
// joins; before the start it counts down and says the order is drawn by the published lottery;
// after the draw it shows the ticket's position and how many are ahead exactly as the API answers
// them (and the lottery's order is the one recomputed from the seed); a reload and a second tab
// keep the same ticket; on admission it continues to the shop's URL with an admission that then
// orders; sold out is said plainly. With proof of work off it joins without asking for a challenge;
// a solution the service refuses (altered on its way: PROOF_INVALID) or a product that turns proof
// of work on while the page joins (PROOF_REQUIRED) makes it solve a new challenge and join.
// Every request the page makes goes to the service (or, once
// admitted, the shop). The page names the product, and says plainly that a product does not exist
// (answered 404). axe-core's WCAG 2.1 AA rules find nothing on it in any of its states, at a phone's
// width and a desktop's, and its figures break no word at 360 px. With WAIT_SCREENSHOTS=<dir> it saves phone and desktop screenshots there
// (docs/images holds the ones the README shows).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { createSigner } from 'fast-jwt';
import { solveChallenge } from 'altcha-lib/v1';
import { Browser, chromium, Page } from 'playwright-core';
import { axeViolations } from './support/axe';
import { waitFor } from './support/wait';
import { chromiumPath } from './support/chromium';
import { resetState } from './support/database';
import { admin, request, ServiceProcess, startedTogether, startService } from './support/service';
import { openSaleNow, recomputeLottery } from './support/waiting-room';

const SCREENSHOTS = process.env.WAIT_SCREENSHOTS;
const env = {
  POW_SECRET: 'proof-of-work-secret-for-the-specs-0123456789',
  ADMISSION_TICK_MS: '50',
  LIVE_STATS_MS: '0',
};

describe("the buyer's waiting page in a real browser, against two service processes", () => {
  let a: ServiceProcess;
  let b: ServiceProcess;
  let browser: Browser;
  let shop: http.Server;
  let shopUrl: string;
  const shopVisits: URL[] = [];
  /** Requests and problems seen by every page, checked at the end. */
  const foreign: string[] = [];
  const problems: string[] = [];
  /** Services started by a single test, whose pages are watched too. */
  const moreOrigins: string[] = [];

  const product = async (body: Record<string, unknown>) => {
    const r = await request(a.url, 'POST', '/admin/products', { name: 'waited', segments: 1, ...body }, admin);
    if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`);
    return r.body.id as number;
  };
  /** Joins through the API as a script would, solving the challenge with altcha-lib in Node. */
  const apiJoin = async (base: string, productId: number, userId: string) => {
    const c = (await request(base, 'GET', `/products/${productId}/queue/challenge`)).body;
    const s = await solveChallenge(c.challenge, c.salt, c.algorithm, c.maxnumber).promise;
    const proof = Buffer.from(JSON.stringify({ ...c, number: s!.number })).toString('base64');
    const r = await request(base, 'POST', `/products/${productId}/queue`, { userId }, { 'x-proof-of-work': proof });
    if (r.status !== 201 && r.status !== 200) throw new Error(`join: ${r.status} ${r.text}`);
    return r.body as { id: string };
  };
  const ticket = async (productId: number, id: string) =>
    (await request(b.url, 'GET', `/products/${productId}/queue/${id}`)).body as {
      lotteryId: string;
      status: string;
      position: number | null;
      ahead: number | null;
      admission?: string;
    };
  const text = (page: Page, testid: string) =>
    page.evaluate((id) => document.querySelector(`[data-testid="${id}"]`)?.textContent ?? null, testid);
  const storedTicket = (page: Page, productId: number, user: string) =>
    page.evaluate((key) => localStorage.getItem(key), `flashsale-ticket:${productId}:${user}`);
  /** `refusals`: the test makes the service refuse a join, which Chromium logs as a failed resource load. */
  const watch = (page: Page, refusals = false) => {
    page.on('request', (r) => {
      if (![a.url, b.url, shopUrl, ...moreOrigins].some((o) => r.url().startsWith(`${o}/`))) foreign.push(r.url());
    });
    page.on('console', (m) => {
      if (refusals && /responded with a status of 403/.test(m.text())) return;
      if (m.type() === 'error') problems.push(m.text());
    });
    page.on('pageerror', (e) => problems.push(e.message));
    return page;
  };
  const phone = () =>
    browser.newContext({ viewport: { width: 360, height: 740 }, deviceScaleFactor: 2, reducedMotion: 'reduce' });
  const shot = async (page: Page, name: string) => {
    if (!SCREENSHOTS) return;
    mkdirSync(SCREENSHOTS, { recursive: true });
    await page.screenshot({ path: join(SCREENSHOTS, name), fullPage: true });
  };

  beforeAll(async () => {
    await resetState();
    shop = http.createServer((req, res) => {
      shopVisits.push(new URL(req.url ?? '/', shopUrl));
      res.setHeader('content-type', 'text/html; charset=utf-8');
      res.end('<!doctype html><title>The shop</title><h1>Checkout</h1>');
    });
    await new Promise<void>((resolve) => shop.listen(0, '127.0.0.1', resolve));
    shopUrl = `http://127.0.0.1:${(shop.address() as AddressInfo).port}`;
    [a, b] = await startedTogether([startService(env), startService(env)]);
    browser = await chromium.launch({
      executablePath: chromiumPath(),
      args: ['--no-sandbox', '--disable-dev-shm-usage'],
    });
  });
  afterAll(async () => {
    await browser?.close();
    await new Promise((resolve) => shop?.close(resolve));
    await Promise.all([a?.stop(), b?.stop()]);
  });

  it('serves the page with a Content-Security-Policy that allows nothing from elsewhere', async () => {
    const id = await product({ stock: 1, waitingRoom: true, proofOfWork: true });
    const r = await request(a.url, 'GET', `/products/${id}/wait`);
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(r.headers['content-security-policy']).toContain("default-src 'self'");
    expect(r.headers['content-security-policy']).toContain("script-src 'self'");
    expect(r.text).not.toMatch(/https?:\/\//);
    const info = await request(b.url, 'GET', `/products/${id}/wait/info`);
    expect(info.body).toMatchObject({ productId: id, waitingRoom: true, proofOfWork: true, identity: false });
  });

  it('names the product; an unknown product is answered 404 and a malformed id 400, and the page says so without a "Loading…" above it', async () => {
    const id = await product({ name: 'Limited sneaker', stock: 1, waitingRoom: true, proofOfWork: false });
    expect((await request(a.url, 'GET', `/products/${id}/wait/info`)).body.name).toBe('Limited sneaker');
    // Not watched: the browser logs the 404 and the 400 below as failed loads.
    const page = await (await phone()).newPage();
    await page.goto(`${a.url}/products/${id}/wait#user=page-named`);
    await waitFor('the ticket', () => storedTicket(page, id, 'page-named'), 30_000);
    expect(await text(page, 'product')).toBe('Limited sneaker');
    expect(await page.title()).toBe('Limited sneaker: waiting room');

    const unknown = id + 1000;
    expect((await request(a.url, 'GET', `/products/${unknown}/wait`)).status).toBe(404);
    expect((await request(a.url, 'GET', `/products/abc/wait`)).status).toBe(400);
    const info = await request(b.url, 'GET', '/products/abc/wait/info');
    expect({ status: info.status, code: info.body.code }).toEqual({ status: 400, code: 'VALIDATION_FAILED' });
    expect((await request(b.url, 'GET', `/products/${unknown}/wait/info`)).body.code).toBe('PRODUCT_NOT_FOUND');
    for (const [path, said] of [
      [`/products/${unknown}/wait`, 'There is no such product.'],
      ['/products/0/wait', 'This address names no product.'],
    ]) {
      const answer = await page.goto(`${a.url}${path}`);
      expect(answer?.status()).toBe(path.endsWith('/0/wait') ? 400 : 404);
      await waitFor(`the error on ${path}`, async () => (await text(page, 'error'))?.startsWith(said));
      expect(await text(page, 'status')).toBe('');
    }
    await page.context().close();
  });

  it('before the start: solves, joins, counts down and says the order is drawn by lottery; after the draw it shows the place the API gives, through a reload and a second tab', async () => {
    // Half an hour ahead: the sale opens when the spec has seen the page before the start
    // (openSaleNow), however long the browser and the solving take on this machine.
    const startsAt = Date.now() + 1_800_000;
    const id = await product({
      stock: 1,
      waitingRoom: true,
      proofOfWork: true,
      startsAt: new Date(startsAt).toISOString(),
    });
    // Others join through the API, on both processes.
    const others = Array.from({ length: 7 }, (_, i) => `api-${i}`);
    const ids: string[] = [];
    for (const [i, u] of others.entries()) ids.push((await apiJoin(i % 2 ? a.url : b.url, id, u)).id);

    const context = await phone();
    const page = watch(await context.newPage());
    await page.goto(`${a.url}/products/${id}/wait#user=page-early`);
    await waitFor('the pre-queue page', async () => (await text(page, 'status'))?.includes('drawn by lottery'), 30_000);
    // The fragment is taken out of the address bar; the page solved a challenge to join.
    expect(new URL(page.url()).hash).toBe('');
    expect(Number(await page.evaluate(() => document.documentElement.dataset.solvedMs))).toBeGreaterThanOrEqual(0);
    expect(await page.$eval('#before', (e) => (e as HTMLElement).hidden)).toBe(false);
    expect(await page.getAttribute('[data-testid="fairness"]', 'href')).toBe(`/products/${id}/queue/fairness`);
    await waitFor('the countdown', async () => /^\d\d:\d\d$/.test((await text(page, 'countdown')) ?? ''));
    const early = await storedTicket(page, id, 'page-early');
    expect(early).toMatch(/\S/);
    ids.push(early!);
    expect((await ticket(id, early!)).position).toBeNull();
    // Keyboard: the first stop is the lottery's record.
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('fairness');
    await shot(page, 'wait-page-phone-before.png');
    await openSaleNow([a.url, b.url], id, early!);

    // The draw: every ticket gets the place the seed gives it.
    const placed = await waitFor(
      'the draw',
      async () => {
        const ts = await Promise.all(ids.map((t) => ticket(id, t)));
        return ts.every((t) => t.position !== null) ? ts : null;
      },
      40_000,
      200,
    );
    const positions = placed.map((t) => t.position as number);
    const lotteryIds = placed.map((t) => t.lotteryId);
    const fairness = (await request(a.url, 'GET', `/products/${id}/queue/fairness`)).body;
    const drawn = ids.map((t, i) => ({ t, i, lotteryId: lotteryIds[i], p: positions[i] })).sort((x, y) => x.p - y.p);
    expect(drawn.map((x) => x.lotteryId)).toEqual(recomputeLottery(fairness.seed, lotteryIds));

    // A waiting user (one unit: the first two places are admitted) opens the page: the page, which
    // must solve again to join, is answered the same ticket, and shows the API's place.
    const waiting = drawn.find((x) => x.p >= 3 && x.t !== early)!;
    const user = others[waiting.i];
    await context.close();
    const theirs = await phone();
    const page2 = watch(await theirs.newPage());
    await page2.goto(`${a.url}/products/${id}/wait#user=${user}`);
    await waitFor('the place', async () => (await text(page2, 'position')) === String(waiting.p), 30_000);
    const api = await ticket(id, waiting.t);
    expect(api).toMatchObject({ status: 'waiting', position: waiting.p });
    expect(await text(page2, 'ahead')).toBe(String(api.ahead));
    expect(await text(page2, 'status')).toBe(
      `You are number ${waiting.p} in the queue, ${api.ahead} ${api.ahead === 1 ? 'person' : 'people'} ahead of you.`,
    );
    // The same ticket: the page's join was answered the user's place (its token now carries it).
    const stored = (await storedTicket(page2, id, user))!;
    expect(await ticket(id, stored)).toMatchObject({ lotteryId: waiting.lotteryId, position: waiting.p });
    const progress = Number(await page2.getAttribute('[data-testid="progress"]', 'value'));
    expect(progress).toBe(Math.round(((waiting.p - 1 - api.ahead!) / (waiting.p - 1)) * 100));
    await shot(page2, 'wait-page-phone-queue.png');

    // A reload keeps the place, without joining again.
    const joins: string[] = [];
    page2.on('request', (r) => {
      if (r.method() === 'POST') joins.push(r.url());
    });
    await page2.reload();
    await waitFor(
      'the place after a reload',
      async () => (await text(page2, 'position')) === String(waiting.p),
      30_000,
    );
    expect(joins).toEqual([]);
    // A second tab of the same browser shows the same ticket.
    const tab = watch(await theirs.newPage());
    await tab.goto(`${a.url}/products/${id}/wait`);
    await waitFor('the place in a second tab', async () => (await text(tab, 'position')) === String(waiting.p), 30_000);
    expect(await storedTicket(tab, id, user)).toBe(stored);

    const desktop = watch(await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage());
    await desktop.goto(`${a.url}/products/${id}/wait#user=${user}`);
    await waitFor(
      'the place on the desktop',
      async () => (await text(desktop, 'position')) === String(waiting.p),
      30_000,
    );
    await shot(desktop, 'wait-page-desktop-queue.png');
    await theirs.close();
    await desktop.context().close();
  });

  it("on admission continues to the shop's URL with an admission that orders", async () => {
    const id = await product({
      stock: 2,
      waitingRoom: true,
      proofOfWork: true,
      continueUrl: `${shopUrl}/checkout?item=7`,
    });
    const context = await phone();
    const page = watch(await context.newPage());
    await page.goto(`${b.url}/products/${id}/wait#user=page-buyer`);
    await page.waitForURL((u) => u.toString().startsWith(shopUrl), { timeout: 30_000 });
    const visit = shopVisits.find((u) => u.pathname === '/checkout' && u.searchParams.get('item') === '7')!;
    const admission = visit.searchParams.get('admission');
    expect(admission).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    const order = await request(a.url, 'POST', '/orders', { userId: 'page-buyer', productId: id, admission });
    expect(order.status).toBe(201);
    expect(order.body).toMatchObject({ productId: id, userId: 'page-buyer', status: 'reserved' });
    // Back on the page the ticket is spent.
    await page.goto(`${b.url}/products/${id}/wait`);
    await waitFor('the ordered ticket', async () => (await text(page, 'status'))?.includes('You have ordered'), 30_000);
    await context.close();
  });

  it('shows the admission for an API client when the product names no shop URL', async () => {
    const id = await product({ stock: 1, waitingRoom: true, proofOfWork: true });
    const page = watch(await (await phone()).newPage());
    await page.goto(`${a.url}/products/${id}/wait#user=page-token`);
    await waitFor(
      'the admission',
      async () => (await page.inputValue('[data-testid="token"]').catch(() => '')) !== '',
      30_000,
    );
    const shown = await page.inputValue('[data-testid="token"]');
    const t = await ticket(id, (await storedTicket(page, id, 'page-token'))!);
    expect(t).toMatchObject({ status: 'admitted', admission: shown });
    expect(await text(page, 'status')).toContain('It is your turn');
    await shot(page, 'wait-page-phone-admitted.png');
    await page.context().close();
  });

  it('says sold out plainly', async () => {
    const id = await product({ stock: 1, waitingRoom: true, proofOfWork: true });
    const first = await apiJoin(a.url, id, 'quick');
    const admitted = await waitFor('the admission', async () => {
      const t = await ticket(id, first.id);
      return t.status === 'admitted' ? t : null;
    });
    const order = await request(b.url, 'POST', '/orders', {
      userId: 'quick',
      productId: id,
      admission: admitted.admission,
    });
    expect(order.status).toBe(201);
    const page = watch(await (await phone()).newPage());
    await page.goto(`${b.url}/products/${id}/wait#user=page-late`);
    await waitFor('sold out', async () => (await text(page, 'status'))?.startsWith('Sold out'), 30_000);
    const t = await ticket(id, (await storedTicket(page, id, 'page-late'))!);
    expect(t.status).toBe('sold_out');
    await page.context().close();
  });

  it('with proof of work off, joins without asking for a challenge and shows the place the API gives', async () => {
    const id = await product({ stock: 1, waitingRoom: true, proofOfWork: false });
    // Three ahead, so the page's buyer waits (two admissions are due for one unit at the ratio of 1.5).
    for (const u of ['ahead-1', 'ahead-2', 'ahead-3'])
      expect((await request(b.url, 'POST', `/products/${id}/queue`, { userId: u })).status).toBe(201);
    const page = watch(await (await phone()).newPage());
    const asked: string[] = [];
    page.on('request', (r) => asked.push(`${r.method()} ${new URL(r.url()).pathname}`));
    await page.goto(`${a.url}/products/${id}/wait#user=page-no-proof`);
    const stored = await waitFor('the ticket', () => storedTicket(page, id, 'page-no-proof'), 30_000);
    const t = await ticket(id, stored);
    await waitFor('the position', async () => (await text(page, 'position')) === String(t.position), 30_000);
    expect(t).toMatchObject({ status: 'waiting', position: 4, ahead: 3 });
    expect(asked).toContain(`POST /products/${id}/queue`);
    expect(asked.filter((r) => r.includes('/queue/challenge'))).toEqual([]);
    expect(await page.evaluate(() => document.documentElement.dataset.solvedMs)).toBeUndefined();
    await page.context().close();
  });

  it('when its countdown reaches the start, polls when Retry-After says (never sooner, but at the start for a poll it puts in the first second after it) and shows the drawn place', async () => {
    // 40 tickets in the pre-queue for one unit: the service paces most of their first polls after
    // the start 2 s late (by lottery key). Once the count is in, the start is moved 5 s ahead and the
    // page opened for a user told so: its countdown then reaches zero while its poll is due later.
    const id = await product({
      stock: 1,
      waitingRoom: true,
      proofOfWork: false,
      startsAt: new Date(Date.now() + 1_800_000).toISOString(),
    });
    const users = Array.from({ length: 40 }, (_, i) => `paced-${i}`);
    const joined: Array<{ id: string }> = [];
    for (const u of users) joined.push((await request(a.url, 'POST', `/products/${id}/queue`, { userId: u })).body);
    const startsAt = Date.now() + 5000;
    const opened = await request(
      a.url,
      'PATCH',
      `/admin/products/${id}`,
      { startsAt: new Date(startsAt).toISOString() },
      admin,
    );
    expect(opened.status).toBe(200);
    // A user whose answer now puts its first poll 2 s after the start (the wave: Retry-After beyond the seconds to the start).
    const late = await waitFor('a ticket paced 2 s after the start', async () => {
      for (const [i, t] of joined.entries()) {
        const r = await request(b.url, 'GET', `/products/${id}/queue/${t.id}`);
        if (Number(r.headers['retry-after']) - r.body.estimatedWaitS === 2) return users[i];
      }
      return null;
    });
    const context = await phone();
    const page = watch(await context.newPage());
    // Every call of the page, timed by the page's own clock: sent, and answered with Retry-After.
    await page.addInitScript(() => {
      const log: Array<{ path: string; sentAt: number; answeredAt?: number; retryAfterS?: number }> = [];
      (window as unknown as { calls: typeof log }).calls = log;
      const fetched = window.fetch.bind(window);
      window.fetch = async (input, init) => {
        const call: (typeof log)[number] = {
          path: input instanceof Request ? input.url : input.toString(),
          sentAt: Date.now(),
        };
        log.push(call);
        const res = await fetched(input, init);
        call.answeredAt = Date.now();
        call.retryAfterS = Number(res.headers.get('retry-after'));
        return res;
      };
    });
    await page.goto(`${a.url}/products/${id}/wait#user=${late}`);
    // Until the page shows the drawn place (or the admission, should the draw put this user first).
    await waitFor(
      'the place after the draw',
      async () =>
        /^\d/.test((await text(page, 'position')) ?? '') ||
        (await page.evaluate(() => document.documentElement.dataset.ticketStatus)) === 'admitted',
      30_000,
    );
    const calls = (await page.evaluate(() => (window as unknown as { calls: unknown[] }).calls)) as Array<{
      path: string;
      sentAt: number;
      answeredAt: number;
      retryAfterS: number;
    }>;
    const polls = calls.filter((c) => c.path.includes('/queue'));
    expect(polls.length).toBeGreaterThanOrEqual(2);
    for (let i = 1; i < polls.length; i++) {
      const { answeredAt, retryAfterS } = polls[i - 1];
      let due = answeredAt + retryAfterS * 1000;
      // Put by Retry-After in the first second after the start: made at the start.
      if (answeredAt < startsAt && due >= startsAt && due < startsAt + 1000) due = startsAt;
      expect({ poll: i, early: polls[i].sentAt < due - 5 }).toEqual({ poll: i, early: false });
    }
    // The rule itself, in the page, with chosen times (s: the start). A string, so that the
    // dynamic import reaches the browser as written (compiled here, it would become a require).
    const delays = await page.evaluate(`(async () => {
      const { nextPollDelayMs } = await import('/wait/assets/pacing.js');
      const s = 1000000;
      return [
        nextPollDelayMs(1, s - 400, s), // lands 0.6 s after the start: at the start, 50 ms after it
        nextPollDelayMs(3, s - 2100, s), // 0.9 s after: the same
        nextPollDelayMs(2, s - 900, s), // 1.1 s after: as Retry-After says
        nextPollDelayMs(1, s - 1500, s), // before the start (the service's asking back): as it says
        nextPollDelayMs(1, s + 100, s), // after the start: as it says
        nextPollDelayMs(5, s, null), // no start
        nextPollDelayMs(0, s + 100, s), // the place is being drawn: at once (the service holds the poll until the draw)
      ];
    })()`);
    expect(delays).toEqual([450, 2150, 2000, 1000, 1000, 5000, 0]);
    await context.close();
  });

  it('solves a new challenge when the service refuses a solution (altered on its way) or asks for one it did not need before', async () => {
    // Refused: the first join's solution is altered in flight, so the service answers PROOF_INVALID.
    const id = await product({ stock: 1, waitingRoom: true, proofOfWork: true });
    const page = watch(await (await phone()).newPage(), true);
    let posts = 0;
    await page.route(`**/products/${id}/queue`, async (route) => {
      const proof = route.request().headers()['x-proof-of-work'];
      if (route.request().method() !== 'POST' || ++posts > 1 || proof === undefined) return route.continue();
      const altered = JSON.parse(Buffer.from(proof, 'base64').toString('utf8')) as { number: number };
      altered.number += 1;
      await route.continue({
        headers: {
          ...route.request().headers(),
          'x-proof-of-work': Buffer.from(JSON.stringify(altered)).toString('base64'),
        },
      });
    });
    const answers: string[] = [];
    page.on('response', async (r) => {
      if (r.request().method() === 'POST' && new URL(r.url()).pathname === `/products/${id}/queue`)
        answers.push(`${r.status()} ${((await r.json().catch(() => ({}))) as { code?: string }).code ?? ''}`.trim());
    });
    await page.goto(`${a.url}/products/${id}/wait#user=page-refused`);
    const stored = await waitFor('the ticket', () => storedTicket(page, id, 'page-refused'), 30_000);
    expect((await ticket(id, stored)).status).toMatch(/waiting|admitted/);
    await waitFor('both answers', async () => answers.length >= 2);
    expect(answers.slice(0, 2)).toEqual(['403 PROOF_INVALID', '201']);
    await page.context().close();

    // Required since the page looked: the product turns proof of work on while the page's first
    // join is on its way; the service answers PROOF_REQUIRED and the page solves one.
    const later = await product({ stock: 1, waitingRoom: true, proofOfWork: false });
    const second = watch(await (await phone()).newPage(), true);
    const seen: string[] = [];
    second.on('response', async (r) => {
      const path = new URL(r.url()).pathname;
      if (path.startsWith(`/products/${later}/queue`) && path !== `/products/${later}/queue/fairness`)
        seen.push(`${r.request().method()} ${path.endsWith('/challenge') ? 'challenge' : 'join'} ${r.status()}`);
    });
    let held = false;
    await second.route(`**/products/${later}/queue`, async (route) => {
      if (route.request().method() !== 'POST' || held) return route.continue();
      held = true;
      const on = await request(a.url, 'PATCH', `/admin/products/${later}`, { proofOfWork: true }, admin);
      expect(on.status).toBe(200);
      // Both processes see the change once their product cache renews.
      await waitFor('proof of work on everywhere', async () => {
        const tries = await Promise.all(
          [a.url, b.url].map((u) => request(u, 'POST', `/products/${later}/queue`, { userId: `probe-${Date.now()}` })),
        );
        return tries.every((r) => r.status === 403 && r.body?.code === 'PROOF_REQUIRED');
      });
      await route.continue();
    });
    await second.goto(`${b.url}/products/${later}/wait#user=page-required`);
    const kept = await waitFor('the ticket', () => storedTicket(second, later, 'page-required'), 30_000);
    expect((await ticket(later, kept)).status).toMatch(/waiting|admitted/);
    expect(seen.filter((x) => !x.startsWith('GET join'))).toEqual([
      'POST join 403',
      'GET challenge 200',
      'POST join 201',
    ]);
    expect(Number(await second.evaluate(() => document.documentElement.dataset.solvedMs))).toBeGreaterThanOrEqual(0);
    await second.context().close();
  });

  it('with buyer identity on, takes the buyer token from the fragment, keeps it out of the address bar, and joins as its user', async () => {
    const secret = 'buyer-secret-for-the-specs-0123456789abcdef';
    const c = await startService({ ...env, BUYER_JWT_SECRET: secret });
    moreOrigins.push(c.url);
    try {
      const id = await product({ stock: 1, waitingRoom: true, proofOfWork: true });
      const token = createSigner({ key: Buffer.from(secret), algorithm: 'HS256', expiresIn: 600_000 })({
        sub: 'tok-1',
      });
      const page = watch(await (await phone()).newPage());
      await page.goto(`${c.url}/products/${id}/wait#token=${token}`);
      await waitFor('the ticket', async () => (await storedTicket(page, id, 'tok-1')) !== null, 30_000);
      expect(new URL(page.url()).hash).toBe('');
      expect(await page.evaluate(() => sessionStorage.getItem('flashsale-buyer-token'))).toBe(token);
      const ticketId = (await storedTicket(page, id, 'tok-1'))!;
      const own = await request(c.url, 'GET', `/products/${id}/queue/${ticketId}`, undefined, {
        authorization: `Bearer ${token}`,
      });
      expect(own.body).toMatchObject({ id: ticketId, userId: 'tok-1' });
      // The page polls with the token (a poll without it is 401 with identity on).
      await page.reload();
      await waitFor(
        'the ticket after a reload',
        async () => (await text(page, 'status'))?.includes('your turn'),
        30_000,
      );
      expect(await page.inputValue('[data-testid="token"]')).toBe(
        (
          await request(c.url, 'GET', `/products/${id}/queue/${ticketId}`, undefined, {
            authorization: `Bearer ${token}`,
          })
        ).body.admission,
      );
      await page.context().close();
    } finally {
      await c.stop();
    }
  });

  it('has no WCAG 2.1 AA violation (axe-core) before the start, in the queue, admitted or on an unknown product, at 360, 390 and 1280 px, and breaks no word of its figures', async () => {
    const before = await product({
      stock: 1,
      waitingRoom: true,
      startsAt: new Date(Date.now() + 1_800_000).toISOString(),
    });
    const queued = await product({ stock: 1, waitingRoom: true });
    for (const u of ['axe-ahead-1', 'axe-ahead-2', 'axe-ahead-3'])
      expect((await request(b.url, 'POST', `/products/${queued}/queue`, { userId: u })).status).toBe(201);
    const admitted = await product({ stock: 1, waitingRoom: true });
    const states: Array<[string, string, (page: Page) => Promise<boolean>]> = [
      ['before the start', `/products/${before}/wait#user=axe-early`, async (p) => !(await p.isHidden('#countdown'))],
      [
        'in the queue',
        `/products/${queued}/wait#user=axe-waiting`,
        async (p) => /^\d/.test((await text(p, 'position')) ?? ''),
      ],
      ['admitted', `/products/${admitted}/wait#user=axe-first`, async (p) => !(await p.isHidden('#token'))],
      ['an unknown product', `/products/${admitted + 1000}/wait`, async (p) => Boolean(await text(p, 'error'))],
    ];
    // Its own context: axe-core's script is added to the page, which the page's CSP would refuse.
    const context = await browser.newContext({
      bypassCSP: true,
      viewport: { width: 360, height: 740 },
      deviceScaleFactor: 2,
    });
    try {
      for (const [state, path, shown] of states) {
        const page = await context.newPage();
        await page.goto(`${a.url}${path}`);
        await waitFor(`the page ${state}`, () => shown(page), 30_000);
        for (const width of [360, 390, 1280]) {
          await page.setViewportSize({ width, height: 740 });
          expect({ state, width, violations: await axeViolations(page) }).toEqual({ state, width, violations: [] });
        }
        if (state === 'in the queue') {
          // The longest figures the page writes, at a phone's width: each word on one line, nothing wider than the screen.
          await page.setViewportSize({ width: 360, height: 740 });
          const layout = await page.evaluate(() => {
            const set = (id: string, value: string) => (document.getElementById(id)!.textContent = value);
            set('position', '123,456');
            set('ahead', '123,455');
            set('eta', 'about 12 minutes');
            const split: string[] = [];
            for (const eta of ['7 seconds', 'about 12 minutes', 'about 1.5 hours']) {
              set('eta', eta);
              for (const dd of document.querySelectorAll('.figures dd')) {
                const node = dd.firstChild!;
                let at = 0;
                for (const word of (node.textContent ?? '').split(' ')) {
                  const range = document.createRange();
                  range.setStart(node, at);
                  range.setEnd(node, at + word.length);
                  if (new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size > 1) split.push(word);
                  at += word.length + 1;
                }
              }
            }
            return { split, scrollWidth: document.documentElement.scrollWidth, width: window.innerWidth };
          });
          expect(layout).toEqual({ split: [], scrollWidth: 360, width: 360 });
        }
        await page.close();
      }
    } finally {
      await context.close();
    }
  });

  it('made no request anywhere but the service and the shop, and no page error', () => {
    expect(foreign).toEqual([]);
    expect(problems).toEqual([]);
  });
});
