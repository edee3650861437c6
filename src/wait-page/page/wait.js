// The buyer's waiting page. It keeps one ticket per product and buyer (its id in localStorage, so a
// reload or a second tab polls the same ticket), solves the proof-of-work challenge in Web Workers
// when the product asks for one (altcha-lib's solver, served by this service), joins, and then polls
// the ticket as often as Retry-After says. The shop hands the buyer over in the URL's fragment,
// which never reaches a server: #token=<buyer JWT> when buyer identity is on (moved to
// sessionStorage at once and taken out of the address bar), or #user=<userId> when it is off.
import { nextPollDelayMs } from './pacing.js';
import { solve } from './solver.js';

const $ = (id) => document.getElementById(id);
const match = /^\/products\/(\d+)\/wait\/?$/.exec(location.pathname);
const productId = match ? Number(match[1]) : null;

const state = {
  info: null,
  user: null,
  token: null,
  ticketId: null,
  timer: null,
  clockSkewMs: 0,
  continued: false,
  said: false,
};

function say(text) {
  state.said = true;
  // The live region is only rewritten when its words change, so a screen reader hears changes, not every poll.
  if ($('status').textContent !== text) $('status').textContent = text;
}
function fail(text) {
  $('error').textContent = text;
  // "Loading…" never stands above an error: nothing was loaded.
  if (text && !state.said) $('status').textContent = '';
}
function working(text) {
  $('working').hidden = text === null;
  if (text !== null) $('working-text').textContent = text;
}
function show(section) {
  for (const id of ['before', 'queue', 'admitted']) $(id).hidden = id !== section;
}

/** The buyer from the fragment the shop handed over, then from this browser's storage. */
function takeBuyer() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.has('token')) sessionStorage.setItem('flashsale-buyer-token', fragment.get('token'));
  if (fragment.has('user')) localStorage.setItem('flashsale-user', fragment.get('user'));
  if (location.hash) history.replaceState(null, '', location.pathname + location.search);
  state.token = sessionStorage.getItem('flashsale-buyer-token');
  if (state.token) {
    try {
      const claims = JSON.parse(atob(state.token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/')));
      state.user = String(claims.sub);
    } catch {
      state.user = null;
    }
    return;
  }
  state.user = localStorage.getItem('flashsale-user');
  if (!state.user && !state.info.identity) {
    // No identity and no user named: a guest id of this browser (development, or a gateway in front).
    state.user = `guest-${crypto.getRandomValues(new Uint32Array(2)).join('')}`;
    localStorage.setItem('flashsale-user', state.user);
  }
}

const ticketKey = () => `flashsale-ticket:${productId}:${state.user}`;

async function api(method, path, { body, headers = {} } = {}) {
  const h = { ...headers };
  if (state.token) h.authorization = `Bearer ${state.token}`;
  if (body !== undefined) h['content-type'] = 'application/json';
  const res = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try {
    data = await res.json();
  } catch {
    /* no JSON body */
  }
  // 0 is a real answer: the place is being drawn, and the next poll waits for the draw.
  const retryAfter = res.headers.get('retry-after');
  return { status: res.status, data, retryAfterS: /^[0-9]+$/.test(retryAfter ?? '') ? Number(retryAfter) : null };
}

async function proof() {
  const got = await api('GET', `/products/${productId}/queue/challenge`);
  if (got.status !== 200) return { error: got };
  working('Checking your browser (a short computation keeps scripts out of the queue)…');
  const started = performance.now();
  const number = await solve(got.data);
  const c = got.data;
  const payload = btoa(
    JSON.stringify({ algorithm: c.algorithm, challenge: c.challenge, number, salt: c.salt, signature: c.signature }),
  );
  document.documentElement.dataset.solvedMs = String(Math.round(performance.now() - started));
  return { payload };
}

async function join() {
  for (let attempt = 0; attempt < 3; attempt++) {
    const headers = {};
    if (state.info.proofOfWork) {
      const p = await proof();
      if (p.error) return handle(p.error);
      headers['x-proof-of-work'] = p.payload;
    }
    working('Joining the queue…');
    const res = await api('POST', `/products/${productId}/queue`, { body: { userId: state.user }, headers });
    working(null);
    // A challenge that expired or was outpaced by a harder step while being solved: solve a new one.
    if (res.status === 403 && res.data?.code === 'PROOF_INVALID') continue;
    // Proof of work turned on since the page asked: solve one.
    if (res.status === 403 && res.data?.code === 'PROOF_REQUIRED') {
      state.info.proofOfWork = true;
      continue;
    }
    return handle(res);
  }
  fail('The check kept failing. Reload the page to try again.');
}

async function poll() {
  const res = await api('GET', `/products/${productId}/queue/${state.ticketId}`);
  if (res.status === 404 && res.data?.code === 'TICKET_NOT_FOUND') {
    localStorage.removeItem(ticketKey());
    state.ticketId = null;
    return join();
  }
  return handle(res);
}

function later(seconds, what) {
  laterMs(Math.max(1, seconds) * 1000, what);
}
function laterMs(ms, what) {
  clearTimeout(state.timer);
  state.timer = setTimeout(() => void what().catch(networkTrouble), ms);
}
function networkTrouble() {
  working(null);
  fail('The connection failed; trying again in a few seconds.');
  later(3, () => (state.info === null ? main() : state.ticketId ? poll() : join()));
}

function handle(res) {
  const { status, data } = res;
  if (status === 200 || status === 201) {
    fail('');
    state.ticketId = data.id;
    localStorage.setItem(ticketKey(), data.id);
    render(data);
    if (data.status !== 'ended' && data.status !== 'ordered') {
      const startsAt = state.info.startsAt === null ? null : Date.parse(state.info.startsAt);
      laterMs(nextPollDelayMs(res.retryAfterS ?? 2, serverNow(), startsAt), poll);
    }
    return;
  }
  const code = data?.code;
  if (status === 429 || status === 503) {
    say('Many people are here right now; your place is being kept.');
    return later(res.retryAfterS ?? 2, () => (state.ticketId ? poll() : join()));
  }
  if (code === 'SALE_ENDED') return ended();
  if (code === 'UNAUTHENTICATED')
    return fail('The shop has not signed you in for this page. Go back to the shop and open the queue from there.');
  if (code === 'NO_WAITING_ROOM') return fail('This product sells without a queue: order it in the shop.');
  if (code === 'PRODUCT_NOT_FOUND') return fail('There is no such product. Check the link the shop gave you.');
  if (code === 'VALIDATION_FAILED' && state.info === null) return fail('This address names no product.');
  fail(`Something went wrong (${code ?? status}). Reload the page to try again.`);
}

function ended() {
  show(null);
  say('The sale has ended.');
}

const plural = (n, one, many) => `${n.toLocaleString()} ${n === 1 ? one : many}`;
function duration(s) {
  if (s < 60) return plural(s, 'second', 'seconds');
  const m = Math.round(s / 60);
  if (m < 60) return `about ${plural(m, 'minute', 'minutes')}`;
  return `about ${plural(Math.round(m / 6) / 10, 'hour', 'hours')}`;
}

function render(t) {
  document.documentElement.dataset.ticketStatus = t.status;
  const beforeStart = state.info.startsAt !== null && serverNow() < Date.parse(state.info.startsAt);
  switch (t.status) {
    case 'waiting':
      if (t.position === null) {
        show(beforeStart ? 'before' : 'queue');
        say(
          beforeStart
            ? 'You are in the queue. Your place will be drawn by lottery when the sale starts.'
            : 'The sale has started: your place is being drawn.',
        );
        fillQueue(t);
        return;
      }
      show('queue');
      fillQueue(t);
      say(
        t.ahead === 0
          ? `You are number ${t.position.toLocaleString()}: you are next.`
          : `You are number ${t.position.toLocaleString()} in the queue, ${plural(t.ahead, 'person', 'people')} ahead of you.`,
      );
      return;
    case 'sold_out':
      show('queue');
      fillQueue(t);
      say('Sold out. If units come back, your place is kept and this page tells you.');
      return;
    case 'admitted':
      return admitted(t);
    case 'ordered':
      show(null);
      say('You have ordered this product. Thank you!');
      return;
    case 'ended':
      return ended();
  }
}

function fillQueue(t) {
  $('position').textContent = t.position === null ? '–' : t.position.toLocaleString();
  $('ahead').textContent = t.ahead === null ? '–' : t.ahead.toLocaleString();
  $('eta').textContent =
    t.status === 'sold_out' ? '–' : t.position !== null && t.estimatedWaitS !== null ? duration(t.estimatedWaitS) : '–';
  // The share of the places before this one that have gone through.
  const before = t.position === null ? 0 : t.position - 1;
  const done = before === 0 ? (t.position === null ? 0 : 1) : (before - (t.ahead ?? before)) / before;
  $('progress').value = Math.round(Math.max(0, Math.min(1, done)) * 100);
  $('progress').textContent = `${$('progress').value}%`;
}

function admitted(t) {
  show('admitted');
  const until = t.admissionExpiresAt ? new Date(t.admissionExpiresAt) : null;
  $('expires').textContent = until ? `Your turn lasts until ${until.toLocaleTimeString()}.` : '';
  const url = state.info.continueUrl;
  if (url) {
    const next = new URL(url);
    next.searchParams.set('admission', t.admission);
    $('continue').href = next.toString();
    $('continue-line').hidden = false;
    $('token-box').hidden = true;
    say('It is your turn! Taking you to the shop to order.');
    if (!state.continued) {
      state.continued = true;
      setTimeout(() => location.assign(next.toString()), 1000);
    }
    return;
  }
  $('continue-line').hidden = true;
  $('token-box').hidden = false;
  $('token').value = t.admission;
  say('It is your turn! Order with the admission below before it expires.');
}

const serverNow = () => Date.now() + state.clockSkewMs;
function tick() {
  if (state.info?.startsAt && !$('before').hidden) {
    const left = Math.max(0, Math.ceil((Date.parse(state.info.startsAt) - serverNow()) / 1000));
    const h = Math.floor(left / 3600);
    const m = Math.floor((left % 3600) / 60);
    const s = left % 60;
    const pad = (n) => String(n).padStart(2, '0');
    $('countdown').textContent = `${h > 0 ? `${h}:` : ''}${pad(m)}:${pad(s)}`;
    $('countdown').setAttribute('datetime', `PT${left}S`);
    // At zero the page waits for the poll that Retry-After has already put at the start, or one or
    // two seconds after it (the service paces the pre-queue's first polls by lottery key; see pacing.js).
  }
}

async function main() {
  if (productId === null) return fail('This address names no product.');
  const info = await api('GET', `/products/${productId}/wait/info`);
  if (info.status === 429 || info.status >= 500) {
    say('Many people are here right now; the page tries again in a moment.');
    return later(info.retryAfterS ?? 2, main);
  }
  if (info.status !== 200) return handle(info);
  state.info = info.data;
  state.clockSkewMs = Date.parse(info.data.now) - Date.now();
  $('product').textContent = info.data.name;
  document.title = `${info.data.name}: waiting room`;
  $('fairness').href = `/products/${productId}/queue/fairness`;
  if (!state.info.waitingRoom) return handle({ status: 409, data: { code: 'NO_WAITING_ROOM' } });
  takeBuyer();
  if (!state.user)
    return fail('The shop has not signed you in for this page. Go back to the shop and open the queue from there.');
  setInterval(tick, 1000);
  if (state.info.endsAt && serverNow() >= Date.parse(state.info.endsAt)) return ended();
  state.ticketId = localStorage.getItem(ticketKey());
  await (state.ticketId ? poll() : join());
}

$('copy').addEventListener('click', async () => {
  $('token').select();
  try {
    await navigator.clipboard.writeText($('token').value);
    say('The admission is copied.');
  } catch {
    say('Select the admission and copy it.');
  }
});

// Said by the script, not written in the page: without JavaScript the page says it needs it instead.
$('status').textContent = 'Loading…';
main().catch(networkTrouble);
