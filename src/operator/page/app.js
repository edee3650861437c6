// The operator page: polls GET /admin/live every second (the whole deployment's figures, the
// products and their segments), follows GET /events from the stream's head (every process's order
// and product changes), and sends the admin calls, each after a confirmation. Plain browser
// JavaScript and uPlot; the admin token stays in this tab's sessionStorage.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const state = { token: sessionStorage.getItem('flashsale-admin-token'), cursor: null, charts: null, running: false };
  /** Per product: order events per second of the last minute, from the stream. */
  const eventRates = new Map();

  async function call(method, path, body) {
    const res = await fetch(path, {
      method,
      headers: { authorization: `Bearer ${state.token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const json = await res.json().catch(() => ({}));
    if (res.status === 401) {
      logout("That token was refused (401): the page needs the service's ADMIN_TOKEN.");
      throw new Error('unauthorized');
    }
    if (!res.ok) throw new Error(`${json.code ?? res.status}: ${json.message ?? res.statusText}`);
    return json;
  }

  function say(text, isError) {
    const m = $('message');
    m.textContent = text;
    m.className = isError ? 'error' : '';
  }

  function logout(reason) {
    state.token = null;
    state.running = false;
    sessionStorage.removeItem('flashsale-admin-token');
    $('console').hidden = true;
    $('logout').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = reason ?? '';
  }

  async function login(token) {
    state.token = token;
    try {
      const live = await call('GET', '/admin/live');
      sessionStorage.setItem('flashsale-admin-token', token);
      $('login').hidden = true;
      $('console').hidden = false;
      $('logout').hidden = false;
      $('login-error').textContent = '';
      state.cursor = live.head;
      state.running = true;
      render(live);
      void poll();
      void follow();
    } catch (err) {
      if (err.message !== 'unauthorized') $('login-error').textContent = `Cannot open: ${err.message}`;
    }
  }

  // ---- figures and charts -------------------------------------------------------------------

  const fmt = (n, digits = 0) => (n === null || n === undefined ? '-' : Number(n).toFixed(digits));

  const chartWidth = () => Math.max(200, $('chart-orders').parentElement.clientWidth - 10);
  const clockTime = (t) =>
    new Date(t * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });

  function charts() {
    if (state.charts) return state.charts;
    const opts = (series) => ({
      width: chartWidth(),
      height: 180,
      scales: { x: { time: true } },
      series: [{}, ...series.map(([label, stroke]) => ({ label, stroke, width: 2 }))],
      // One line of clock time per tick, at least 90 px apart, so labels never run into each
      // other; whole numbers only on the y axis (these are counts per second).
      axes: [
        { space: 90, values: (_u, ticks) => ticks.map(clockTime) },
        { size: 50, space: 30, values: (_u, ticks) => ticks.map((v) => (Number.isInteger(v) ? String(v) : '')) },
      ],
      // The legend names the lines; it shows no values (they would read "--" until hovered).
      legend: { live: false },
      cursor: { show: false },
    });
    state.charts = {
      orders: new uPlot(
        opts([
          ['created', '#2b8a3e'],
          ['refused', '#3f7be0'],
          ['429', '#e0a03f'],
          ['5xx', '#b3261e'],
          ['shed', '#6b6b6b'],
        ]),
        [[], [], [], [], [], []],
        $('chart-orders'),
      ),
      locks: new uPlot(
        opts([
          ['lock waits', '#7a3fe0'],
          ['fall-overs', '#e05a3f'],
        ]),
        [[], [], []],
        $('chart-locks'),
      ),
    };
    window.addEventListener('resize', () => {
      for (const chart of Object.values(state.charts)) chart.setSize({ width: chartWidth(), height: 180 });
    });
    return state.charts;
  }

  /** A table's rows; with none, the line under its heading says so instead of leaving it empty. */
  function table(id, rows, none) {
    const empty = $(`${id}-none`);
    empty.textContent = none;
    empty.hidden = rows.length > 0;
    const body = $(id).tBodies[0];
    body.replaceChildren(
      ...rows.map(([k, v]) => {
        const tr = document.createElement('tr');
        tr.dataset.key = k;
        for (const text of [k, v]) {
          const td = document.createElement('td');
          td.textContent = text;
          tr.append(td);
        }
        return tr;
      }),
    );
  }

  function render(live) {
    const l = live.live;
    $('processes').textContent = `${l.processes} process${l.processes === 1 ? '' : 'es'} reporting`;
    $('clock').textContent = new Date(live.at).toLocaleTimeString();
    $('orders-per-s').textContent = fmt(l.ordersPerS, 1);
    $('refusals-per-s').textContent = fmt(l.refusalsPerS, 1);
    const last = (arr) => arr.slice(-l.windowS).reduce((a, b) => a + b, 0) / l.windowS;
    $('limited-per-s').textContent = fmt(last(l.series.rateLimited), 1);
    $('errors-per-s').textContent = fmt(last(l.series.errors), 1);
    $('p50').textContent = fmt(l.p50Ms, 1);
    $('p99').textContent = fmt(l.p99Ms, 1);
    $('lock-wait').textContent = fmt(l.lockWaitMeanMs, 1);
    $('shed-per-s').textContent = fmt(l.shedPerS, 1);
    $('loop-delay').textContent = fmt(l.eventLoopDelayMs);
    const c = charts();
    const s = l.series;
    c.orders.setData([s.at, s.created, s.refused, s.rateLimited, s.errors, s.shed]);
    c.locks.setData([s.at, s.lockWaits, s.fallovers]);
    table(
      'codes',
      Object.entries(l.byCode).sort((a, b) => b[1] - a[1]),
      `No answers in the last ${l.windowS} s.`,
    );
    table(
      'fallovers',
      [
        ...Object.entries(l.fallovers).map(([k, v]) => [`fall-over: ${k}`, v]),
        ...Object.entries(l.dependencyErrors).map(([k, v]) => [`${k} errors`, v]),
      ],
      `None in the last ${l.windowS} s.`,
    );
    renderProducts(live.products);
  }

  // ---- products --------------------------------------------------------------------------------

  const local = (iso) => new Date(iso).toLocaleString();
  /** The sale window in words; an open end is said, not shown as a missing date. */
  function saleWindow(p) {
    if (p.startsAt && p.endsAt) return `on sale ${local(p.startsAt)} to ${local(p.endsAt)}`;
    if (p.startsAt) return `on sale from ${local(p.startsAt)}, no end set`;
    if (p.endsAt) return `on sale until ${local(p.endsAt)}`;
    return 'on sale now, no start or end set';
  }
  const toInput = (iso) => {
    if (!iso) return '';
    const d = new Date(iso);
    return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
  };
  const fromInput = (value) => (value ? new Date(value).toISOString() : null);

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    Object.assign(e, props);
    e.append(...children);
    return e;
  }

  /** The live parts of a card (title, bars, facts), redrawn every second from the latest figures. */
  function drawLive(card, p) {
    card.live = p;
    const perSegment = Math.max(
      1,
      ...p.segments.map((s) => s.stock),
      Math.ceil(p.stocked / Math.max(1, p.segmentCount)),
    );
    card.title.textContent = `#${p.id} ${p.name}${p.waitingRoom ? ' (waiting room)' : ''}`;
    card.bars.replaceChildren(
      ...p.segments.map((s) => {
        const bar = el('div', {
          className: s.stock === 0 ? 'bar empty' : 'bar',
          title: `segment ${s.index}: ${s.stock}`,
        });
        bar.style.height = `${Math.round((100 * s.stock) / perSegment)}%`;
        bar.dataset.stock = String(s.stock);
        return bar;
      }),
    );
    const rate = eventRates.get(p.id);
    const perS = rate ? rate.recent() : { reserved: 0, paid: 0, cancelled: 0, expired: 0 };
    const fact = (testid, text) => {
      const span = el('span', { textContent: text });
      span.dataset.testid = testid;
      return span;
    };
    card.facts.replaceChildren(
      fact('stock', `stock ${p.stock} of ${p.stocked}`),
      fact('sold', `sold ${p.sold}`),
      fact('segment-count', `${p.segmentCount} segments`),
      fact('window', saleWindow(p)),
      fact(
        'rates',
        `last 10 s, per s: reserved ${fmt(perS.reserved, 1)}, paid ${fmt(perS.paid, 1)}, cancelled ${fmt(perS.cancelled, 1)}, expired ${fmt(perS.expired, 1)}`,
      ),
      ...(p.queue
        ? [
            fact(
              'queue',
              `queue: ${p.queue.positions} positions, ${p.queue.admitted} admitted, ${p.queue.positions - p.queue.admitted} waiting`,
            ),
          ]
        : []),
    );
  }

  /**
   * A product's card, made once: its inputs keep what the operator typed while the live parts are
   * redrawn; the actions read the product's latest figures when they run.
   */
  function productCard(first) {
    const root = el('article', { className: 'product' });
    root.dataset.product = String(first.id);
    const card = {
      root,
      title: el('h3'),
      bars: el('div', { className: 'bars', title: 'stock per segment' }),
      facts: el('div', { className: 'facts' }),
    };
    card.bars.dataset.testid = 'segments';
    const id = first.id;
    const units = el('input', { type: 'number', min: 1, value: 100, name: 'units' });
    const segments = el('input', { type: 'number', min: 1, max: 1024, value: first.segmentCount, name: 'segments' });
    const starts = el('input', { type: 'datetime-local', value: toInput(first.startsAt), name: 'startsAt' });
    const ends = el('input', { type: 'datetime-local', value: toInput(first.endsAt), name: 'endsAt' });
    /** An input with its visible name, which a screen reader says too. */
    const field = (text, input) => el('label', { className: 'field' }, `${text} `, input);
    const act = (label, name, question, run) => {
      const b = el('button', { type: 'button', textContent: label });
      b.dataset.action = name;
      b.addEventListener('click', async () => {
        if (!confirm(question(card.live))) return;
        try {
          await run(card.live);
          say(`${label}: done for product ${id}`);
          await refresh();
        } catch (err) {
          say(`${label} failed: ${err.message}`, true);
        }
      });
      return b;
    };
    const actions = el(
      'div',
      { className: 'actions' },
      field('Units', units),
      act(
        'Restock',
        'restock',
        (p) => `Add ${units.value} units to product ${id} (${p.name})?`,
        () => call('POST', `/admin/products/${id}/restock`, { units: Number(units.value) }),
      ),
      field('Segments', segments),
      act(
        'Rebalance',
        'rebalance',
        (p) => `Spread the ${p.stock} units of product ${id} over ${segments.value} segments?`,
        () => call('POST', `/admin/products/${id}/rebalance`, { segments: Number(segments.value) }),
      ),
      field('Starts', starts),
      field('Ends', ends),
      act(
        'Change window',
        'window',
        () => `Set the sale window of product ${id} to ${starts.value || 'open'} - ${ends.value || 'open'}?`,
        () =>
          call('PATCH', `/admin/products/${id}`, { startsAt: fromInput(starts.value), endsAt: fromInput(ends.value) }),
      ),
      act(
        'End sale now',
        'end',
        (p) => `End the sale of product ${id} (${p.name}) now? Orders are refused from now on.`,
        (p) => {
          const now = new Date();
          // The window must end after it starts: a sale that had not started gets its start moved to just before.
          const startsAt =
            p.startsAt && new Date(p.startsAt) >= now ? new Date(now.getTime() - 1000).toISOString() : undefined;
          return call('PATCH', `/admin/products/${id}`, {
            ...(startsAt ? { startsAt } : {}),
            endsAt: now.toISOString(),
          });
        },
      ),
    );
    root.append(card.title, card.bars, card.facts, actions);
    drawLive(card, first);
    return card;
  }

  const cards = new Map();

  function renderProducts(products) {
    const root = $('products');
    $('products-none').hidden = products.length > 0;
    const listed = new Set(products.map((p) => p.id));
    for (const [id, card] of cards)
      if (!listed.has(id)) {
        card.root.remove();
        cards.delete(id);
      }
    products.forEach((p, i) => {
      let card = cards.get(p.id);
      if (card) drawLive(card, p);
      else cards.set(p.id, (card = productCard(p)));
      if (root.children[i] !== card.root) root.insertBefore(card.root, root.children[i] ?? null);
    });
  }

  // ---- the event stream ----------------------------------------------------------------------

  function rateOf(productId) {
    let r = eventRates.get(productId);
    if (!r) {
      const seconds = new Map();
      r = {
        add(type, atMs) {
          const s = Math.floor(atMs / 1000);
          const row = seconds.get(s) ?? { reserved: 0, paid: 0, cancelled: 0, expired: 0 };
          const kind = type.slice('order.'.length);
          if (kind in row) row[kind]++;
          seconds.set(s, row);
          for (const k of seconds.keys()) if (k < s - 60) seconds.delete(k);
        },
        recent() {
          const now = Math.floor(Date.now() / 1000);
          const sum = { reserved: 0, paid: 0, cancelled: 0, expired: 0 };
          for (const [s, row] of seconds) if (s > now - 10) for (const k in sum) sum[k] += row[k];
          for (const k in sum) sum[k] /= 10;
          return sum;
        },
      };
      eventRates.set(productId, r);
    }
    return r;
  }

  function showEvent(e) {
    const list = $('events');
    const what = e.orderId ? `order ${e.orderId} (${e.data.userId})` : JSON.stringify(e.data).slice(0, 80);
    $('events-none').hidden = true;
    list.prepend(el('li', { textContent: `${new Date(e.at).toLocaleTimeString()} #${e.productId} ${e.type} ${what}` }));
    while (list.children.length > 30) list.lastChild.remove();
  }

  async function follow() {
    while (state.running) {
      try {
        const page = await call('GET', `/events?after=${state.cursor}&wait=20&limit=1000`);
        for (const e of page.events) {
          if (e.type.startsWith('order.')) rateOf(e.productId).add(e.type, Date.parse(e.at));
          showEvent(e);
        }
        state.cursor = page.next;
      } catch (err) {
        if (err.message === 'unauthorized') return;
        await new Promise((r) => setTimeout(r, 2000));
      }
    }
  }

  // ---- polling and forms ---------------------------------------------------------------------

  async function refresh() {
    render(await call('GET', '/admin/live'));
  }

  async function poll() {
    while (state.running) {
      try {
        await refresh();
      } catch (err) {
        if (err.message === 'unauthorized') return;
        say(`Live figures unavailable: ${err.message}`, true);
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }

  $('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    void login($('token').value);
  });
  $('logout').addEventListener('click', () => logout());
  $('create').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const body = {
      name: f.get('name'),
      stock: Number(f.get('stock')),
      segments: Number(f.get('segments')),
      ...(f.get('startsAt') ? { startsAt: fromInput(f.get('startsAt')) } : {}),
      ...(f.get('endsAt') ? { endsAt: fromInput(f.get('endsAt')) } : {}),
      waitingRoom: f.get('waitingRoom') === 'on',
    };
    if (!confirm(`Create "${body.name}" with ${body.stock} units in ${body.segments} segments?`)) return;
    try {
      const p = await call('POST', '/admin/products', body);
      say(`Created product ${p.id}`);
      ev.target.reset();
      await refresh();
    } catch (err) {
      say(`Create failed: ${err.message}`, true);
    }
  });

  if (state.token) void login(state.token);
})();
