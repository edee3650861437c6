/// <reference lib="dom" />
// (The callbacks of page.evaluate run in the browser, on its DOM.)
// The operator page in a real browser (Debian's chromium, driven by playwright-core; `.ci/run`
// installs it when missing) against two service processes on one PostgreSQL and one Redis: a wrong
// token is refused; logged in, the operator creates a product through the page, a sale runs
// against both processes, and what the page shows (segment bars, stock, sold, the processes
// reporting, orders per second, the events) is checked against PostgreSQL; then every action
// (restock, rebalance, change the window, end the sale now) is made through the page, each after
// its confirmation, and checked in PostgreSQL. With OPERATOR_SCREENSHOTS=<dir> it saves screenshots
// of the live sale there (docs/images holds the ones the README shows). axe-core's WCAG 2.1 AA
// rules find nothing in the sign-in or the console, at a desktop's width and a phone's, where the
// panels stack without overlapping.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Browser, chromium, Page } from 'playwright-core';
import { Client } from 'pg';
import { axeViolations } from './support/axe';
import { sleep, waitFor } from './support/wait';
import { chromiumPath } from './support/chromium';
import { resetState } from './support/database';
import {
  ADMIN_TOKEN,
  pooled,
  request,
  ServiceProcess,
  shop,
  startedTogether,
  startService,
  testUrls,
} from './support/service';

const SCREENSHOTS = process.env.OPERATOR_SCREENSHOTS;

describe('the operator page in a real browser, against two service processes', () => {
  let a: ServiceProcess;
  let b: ServiceProcess;
  let browser: Browser;
  let page: Page;
  let db: Client;
  const dialogs: string[] = [];
  /** Every answer the browser got that was not a success (the page's files, its icon, its calls). */
  const failedAnswers: string[] = [];

  /** The page's text of an element (by data-testid), inside the card of `productId` when given. */
  const text = (testid: string, productId?: number) =>
    page.evaluate(
      ({ id, pid }) => {
        const root = pid === null ? document : document.querySelector(`[data-product="${pid}"]`);
        return root?.querySelector(`[data-testid="${id}"]`)?.textContent ?? null;
      },
      { id: testid, pid: productId ?? null },
    );
  const bars = (productId: number) =>
    page.evaluate(
      (pid) =>
        [...document.querySelectorAll(`[data-product="${pid}"] [data-testid="segments"] .bar`)].map((b) =>
          Number((b as HTMLElement).dataset.stock),
        ),
      productId,
    );
  const segmentsInDb = async (productId: number) =>
    (
      await db.query<{ stock: string }>('SELECT stock FROM stock_segments WHERE product_id = $1 ORDER BY idx', [
        productId,
      ])
    ).rows.map((r) => Number(r.stock));
  /** Sets an input of the product's card (by name) the way a user's typing ends: value, then input and change events. */
  const setInput = (productId: number, name: string, value: string) =>
    page.fill(`[data-product="${productId}"] input[name="${name}"]`, value);
  /** Clicks an action's button (its confirmation is accepted) and waits for the page to say that it was done. */
  const act = async (productId: number, action: string) => {
    // The previous action's "done" must not be taken for this one's.
    await page.evaluate(() => (document.getElementById('message')!.textContent = ''));
    await page.click(`[data-product="${productId}"] button[data-action="${action}"]`);
    await waitFor(`the page to confirm ${action}`, async () => {
      const said = (await text('message')) ?? '';
      if (said.includes('failed')) throw new Error(said);
      return said.includes(`done for product ${productId}`);
    });
  };
  const shot = async (name: string) => {
    if (!SCREENSHOTS) return;
    // The seconds just past are flushed and polled by then.
    await sleep(2500);
    mkdirSync(SCREENSHOTS, { recursive: true });
    await page.screenshot({ path: join(SCREENSHOTS, name), fullPage: true });
  };

  beforeAll(async () => {
    await resetState();
    db = new Client({ connectionString: testUrls().databaseUrl });
    await db.connect();
    const env = { EVENTS_POLL_MS: '100', EXPIRY_SWEEP_MS: '100' };
    [a, b] = await startedTogether([startService(env), startService(env)]);
    browser = await chromium.launch({
      executablePath: chromiumPath(),
      // As root (CI) Chromium refuses to start sandboxed.
      args: ['--no-sandbox', '--disable-dev-shm-usage'],
    });
    page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('response', (r) => {
      // The wrong token's refusal is the first test's subject; anything else failing is a fault of the page.
      if (r.status() >= 400 && !(r.status() === 401 && r.url().endsWith('/admin/live')))
        failedAnswers.push(`${r.status()} ${r.url()}`);
    });
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.accept();
    });
  });
  afterAll(async () => {
    await browser?.close();
    await db?.end();
    await Promise.all([a?.stop(), b?.stop()]);
  });

  it('refuses a wrong token and shows nothing of the sale', async () => {
    await page.goto(`${a.url}/admin`);
    await page.fill('#token', 'not-the-admin-token');
    await page.click('#login button[type="submit"]');
    await waitFor('the refusal', async () => (await text('login-error'))?.includes('401'));
    expect(await page.$eval('#console', (e) => (e as HTMLElement).hidden)).toBe(true);
  });

  it('logs in, creates a product, and shows a sale on both processes as PostgreSQL has it', async () => {
    await page.fill('#token', ADMIN_TOKEN);
    await page.click('#login button[type="submit"]');
    await page.waitForSelector('#console:not([hidden])');
    // No product yet: the Products heading says so rather than standing over nothing.
    await waitFor('the note that there is no product', async () =>
      page.$eval('#products-none', (e) => !(e as HTMLElement).hidden),
    );
    // The charts' legends name the lines without a value that would read "--".
    const legends = await page.$$eval('.u-legend', (els) => els.map((e) => e.textContent ?? ''));
    expect(legends).toHaveLength(2);
    for (const legend of legends) expect(legend).not.toContain('--');
    expect(legends.join(' ')).toMatch(/created.*refused.*429.*5xx.*shed.*lock waits.*fall-overs/);

    await page.fill('#create input[name="name"]', 'page sale');
    await page.fill('#create input[name="stock"]', '120');
    await page.fill('#create input[name="segments"]', '6');
    await page.click('#create button[type="submit"]');
    await waitFor('the product to be created', async () => /Created product \d+/.test((await text('message')) ?? ''));
    const productId = Number(/Created product (\d+)/.exec((await text('message')) as string)?.[1]);
    expect(dialogs.pop()).toBe('Create "page sale" with 120 units in 6 segments?');
    const [row] = (await db.query('SELECT name, total_stock, segment_count FROM products WHERE id = $1', [productId]))
      .rows;
    expect(row).toEqual({ name: 'page sale', total_stock: '120', segment_count: 6 });
    // A product made without a window is on sale at once, and the card says so in words.
    await waitFor('the card of the new product', async () => (await text('window', productId)) !== null);
    expect(await text('window', productId)).toBe('on sale now, no start or end set');
    expect(await page.$eval('#products-none', (e) => (e as HTMLElement).hidden)).toBe(true);

    // A sale over both processes, with payments and cancels, while the page watches.
    const urls = [a.url, b.url];
    let busy = true;
    const seen = { ordersPerS: 0, processes: 0 };
    const watching = (async () => {
      while (busy) {
        seen.ordersPerS = Math.max(seen.ordersPerS, Number(await text('orders-per-s')));
        seen.processes = Math.max(seen.processes, Number(/\d+/.exec((await text('processes')) ?? '')?.[0] ?? 0));
        await sleep(200);
      }
    })();
    const sold = (
      await pooled(
        Array.from({ length: 200 }, (_, i) => async () => {
          const r = await request(urls[i % 2], 'POST', '/orders', { userId: `page-${i}`, productId });
          return r.status === 201 ? { id: r.body.id as number, userId: `page-${i}` } : null;
        }),
        16,
      )
    ).filter((o): o is { id: number; userId: string } => o !== null);
    expect(sold).toHaveLength(120);
    await pooled(
      sold
        .slice(0, 30)
        .map(
          (o, i) => () =>
            request(
              urls[i % 2],
              'POST',
              `/orders/${o.id}/${i % 3 === 0 ? 'cancel' : 'pay'}`,
              { userId: o.userId },
              shop,
            ),
        ),
      8,
    );
    // The figures of the last seconds include the sale, counted from both processes.
    await waitFor('the page to show the sale', () => seen.ordersPerS > 0 && seen.processes === 2, 15_000);
    busy = false;
    await watching;
    await shot('operator-page-sale.png');

    // What the page shows settles on what PostgreSQL has.
    await waitFor(
      'the segment bars and counters to match PostgreSQL',
      async () => {
        const inDb = await segmentsInDb(productId);
        const stock = inDb.reduce((n, s) => n + s, 0);
        return (
          JSON.stringify(await bars(productId)) === JSON.stringify(inDb) &&
          (await text('stock', productId)) === `stock ${stock} of 120` &&
          (await text('sold', productId)) === `sold ${120 - stock}`
        );
      },
      15_000,
    );
    const cancelled = sold.slice(0, 30).filter((_, i) => i % 3 === 0).length;
    expect(await text('stock', productId)).toBe(`stock ${cancelled} of 120`);
    // The latest events of the stream (the list keeps 30): the payments and cancels that ended the sale.
    await waitFor('the last payments and cancels in the events list', async () => {
      const events = await page.$$eval('#events li', (items) => items.map((li) => li.textContent ?? ''));
      return ['order.paid', 'order.cancelled', 'units.returned'].every((t) => events.some((e) => e.includes(t)));
    });
  });

  it('makes every action through the page, each after a confirmation, as PostgreSQL then shows', async () => {
    const [{ id: productId }] = (await db.query(`SELECT id FROM products WHERE name = 'page sale'`)).rows;
    const product = async () =>
      (
        await db.query(
          `SELECT total_stock::int AS stocked, segment_count AS segments, starts_at, ends_at FROM products WHERE id = $1`,
          [productId],
        )
      ).rows[0];
    const before = await product();

    await setInput(productId, 'units', '30');
    await act(productId, 'restock');
    expect(dialogs.pop()).toMatch(new RegExp(`^Add 30 units to product ${productId}`));
    expect((await product()).stocked).toBe(before.stocked + 30);

    await setInput(productId, 'segments', '3');
    await act(productId, 'rebalance');
    expect(dialogs.pop()).toMatch(/over 3 segments\?$/);
    expect((await product()).segments).toBe(3);
    await waitFor('three bars', async () => (await bars(productId)).length === 3);
    expect(await bars(productId)).toEqual(await segmentsInDb(productId));

    // The window, typed as local times in the page.
    const local = (d: Date) => new Date(d.getTime() - d.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
    const startsAt = new Date(Date.now() - 3_600_000);
    const endsAt = new Date(Date.now() + 86_400_000);
    startsAt.setSeconds(0, 0);
    endsAt.setSeconds(0, 0);
    await setInput(productId, 'startsAt', local(startsAt));
    await setInput(productId, 'endsAt', local(endsAt));
    await act(productId, 'window');
    expect(dialogs.pop()).toMatch(/^Set the sale window/);
    await waitFor('the card to show the window', async () =>
      /^on sale .+ to .+$/.test((await text('window', productId)) ?? ''),
    );
    const windowed = await product();
    expect([windowed.starts_at.getTime(), windowed.ends_at.getTime()]).toEqual([startsAt.getTime(), endsAt.getTime()]);

    await act(productId, 'end');
    expect(dialogs.pop()).toMatch(/^End the sale of product \d+ \(page sale\) now\?/);
    expect((await product()).ends_at.getTime()).toBeLessThanOrEqual(Date.now());
    // The catalog of the other process learns it within PRODUCT_CACHE_MS.
    await waitFor('orders refused as the sale ended', async () => {
      const r = await request(b.url, 'POST', '/orders', { userId: 'too-late', productId });
      return r.status === 403 && r.body.code === 'SALE_ENDED';
    });
    await shot('operator-page-actions.png');
  });

  it('shows the calls a stalled process shed and its event-loop delay', async () => {
    // A third process that sheds new orders from 10 ms of event-loop delay, stopped again and
    // again for longer than that while buyers order from it.
    const c = await startService({ SHED_LAG_MS: '5,10,60000', SHED_SAMPLE_MS: '50' });
    const productId = (
      await request(
        c.url,
        'POST',
        '/admin/products',
        { name: 'shed sale', stock: 10_000, segments: 4 },
        {
          authorization: `Bearer ${ADMIN_TOKEN}`,
        },
      )
    ).body.id as number;
    let stalling = true;
    const stalls = (async () => {
      while (stalling) {
        process.kill(c.pid, 'SIGSTOP');
        await sleep(200);
        process.kill(c.pid, 'SIGCONT');
        await sleep(100);
      }
    })();
    try {
      let n = 0;
      await waitFor('the page to show calls shed and the event-loop delay', async () => {
        await pooled(
          Array.from(
            { length: 40 },
            () => () => request(c.url, 'POST', '/orders', { userId: `shed-${n++}`, productId }),
          ),
          20,
        );
        return Number(await text('shed-per-s')) > 0 && Number(await text('loop-delay')) > 10;
      });
    } finally {
      stalling = false;
      await stalls;
      process.kill(c.pid, 'SIGCONT');
      await c.stop();
    }
  });

  it('says which token it wants, and keeps its sign-in and console free of WCAG 2.1 AA violations (axe-core) at 1400, 390 and 360 px, its panels side by side without overlap on a phone', async () => {
    // Its own context: axe-core's script is added to the page, which the page's CSP would refuse.
    const context = await browser.newContext({ bypassCSP: true, viewport: { width: 390, height: 844 } });
    const phone = await context.newPage();
    try {
      await phone.goto(`${a.url}/admin`);
      expect(await phone.textContent('label[for="token"]')).toContain('ADMIN_TOKEN');
      expect(await phone.textContent('[data-testid="token-hint"]')).toContain('ADMIN_TOKEN');
      expect(await axeViolations(phone)).toEqual([]);
      await phone.fill('#token', 'a-shop-or-buyer-token-perhaps');
      await phone.click('#login button[type="submit"]');
      await waitFor('the refusal', async () =>
        (await phone.textContent('[data-testid="login-error"]'))?.includes('401'),
      );
      expect(await phone.textContent('[data-testid="login-error"]')).toContain('ADMIN_TOKEN');
      expect(await axeViolations(phone)).toEqual([]);

      await phone.fill('#token', ADMIN_TOKEN);
      await phone.click('#login button[type="submit"]');
      await phone.waitForSelector('#console:not([hidden]) [data-product] button[data-action="restock"]');
      // Every input of a product's actions has a name a screen reader says (axe-core's "label" rule).
      const unnamed = await phone.$$eval('[data-product] .actions input', (inputs) =>
        inputs.filter((i) => (i as HTMLInputElement).labels?.length === 0).map((i) => (i as HTMLInputElement).name),
      );
      expect(unnamed).toEqual([]);
      for (const width of [1400, 390, 360]) {
        await phone.setViewportSize({ width, height: 900 });
        expect({ width, violations: await axeViolations(phone) }).toEqual({ width, violations: [] });
        if (width > 400) continue;
        // The panels (figures, charts, answers, products, new product and events) stack: none
        // overlaps another, and nothing is wider than the screen (the charts follow the width).
        await waitFor(`a one-column layout at ${width} px`, async () => {
          const layout = await phone.evaluate(() => {
            const boxes = [...document.querySelectorAll('main > section')].map((e) => e.getBoundingClientRect());
            const overlaps = boxes.flatMap((p, i) =>
              boxes
                .slice(i + 1)
                .filter((q) => p.left < q.right && q.left < p.right && p.top < q.bottom && q.top < p.bottom),
            ).length;
            return { overlaps, scrollWidth: document.documentElement.scrollWidth, width: window.innerWidth };
          });
          return layout.overlaps === 0 && layout.scrollWidth <= layout.width;
        });
      }
    } finally {
      await context.close();
    }
  });

  it('serves every file the page asked for, its icon included, with no error answer', async () => {
    const icon = await fetch(`${a.url}/favicon.ico`);
    expect(icon.status).toBe(200);
    expect(icon.headers.get('content-type')).toBe('image/x-icon');
    // An ICO file: reserved 0, type 1 (icon), then the number of images.
    expect([...new Uint8Array(await icon.arrayBuffer()).subarray(0, 4)]).toEqual([0, 0, 1, 0]);
    expect(await page.$eval('link[rel="icon"]', (l) => (l as HTMLLinkElement).href)).toBe(`${a.url}/favicon.ico`);
    expect(failedAnswers).toEqual([]);
  });
});
