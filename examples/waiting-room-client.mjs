// A storefront's side of the waiting room, as small as it can be (Node 20+, no dependencies):
// join the product's queue, poll the ticket when Retry-After says, and order with the admission
// once admitted. Usage:
//   node examples/waiting-room-client.mjs <service URL> <productId> <userId> [buyer JWT]
// It prints each status it sees; exits 0 once ordered, 1 when its ticket ends (the sale ended, or
// the admission lapsed) or the join is refused. While sold out it keeps polling: units may come back.
const [base, productId, userId, jwt] = process.argv.slice(2);
if (!base || !productId || !userId) {
  console.error('usage: waiting-room-client.mjs <service URL> <productId> <userId> [buyer JWT]');
  process.exit(2);
}
const headers = { 'content-type': 'application/json', ...(jwt ? { authorization: `Bearer ${jwt}` } : {}) };
const sleep = (s) => new Promise((r) => setTimeout(r, s * 1000));
const retryAfter = (res) => Number(res.headers.get('retry-after') ?? 1);

async function call(method, path, body) {
  for (;;) {
    const res = await fetch(`${base}${path}`, { method, headers, body: body && JSON.stringify(body) });
    // Busy, unavailable or over the rate limit: nothing happened; wait as told and ask again.
    if (res.status === 429 || res.status === 503) {
      await sleep(retryAfter(res));
      continue;
    }
    return { res, body: await res.json() };
  }
}

// 1. Join (201 a new ticket, 200 the one this user already has).
let { res, body: ticket } = await call('POST', `/products/${productId}/queue`, { userId });
if (res.status !== 200 && res.status !== 201) {
  console.error(`join refused: ${res.status} ${ticket.code}`);
  process.exit(1);
}
for (;;) {
  // Before the start's draw a ticket has no place yet; an estimate is given only when there is one.
  const place =
    ticket.position === null
      ? 'no place yet (drawn at the start)'
      : `position ${ticket.position}${ticket.ahead === null ? '' : `, ${ticket.ahead} ahead`}`;
  const wait = ticket.estimatedWaitS === null ? 'no estimate yet' : `about ${ticket.estimatedWaitS} s`;
  console.log(`${ticket.status}: ${place}, ${wait}`);
  if (ticket.status === 'ordered') process.exit(0);
  if (ticket.status === 'ended') process.exit(1);
  if (ticket.status === 'admitted') {
    // 2. Order with the admission before admissionExpiresAt.
    const order = await call('POST', '/orders', { userId, productId: Number(productId), admission: ticket.admission });
    if (order.res.status === 201 || order.body.code === 'ALREADY_ORDERED') {
      console.log(`ordered: order ${order.body.id ?? order.body.orderId}; pay it from the shop's backend`);
      process.exit(0);
    }
    // 410 SOLD_OUT: the admission stays usable until it expires; keep polling.
    console.log(`order answered ${order.res.status} ${order.body.code}`);
  }
  // 3. Poll when Retry-After says the answer may have changed.
  await sleep(retryAfter(res));
  ({ res, body: ticket } = await call('GET', `/products/${productId}/queue/${ticket.id}`));
  if (res.status === 404) {
    // The queue lost the ticket (a Redis loss): join again.
    ({ res, body: ticket } = await call('POST', `/products/${productId}/queue`, { userId }));
  }
}
