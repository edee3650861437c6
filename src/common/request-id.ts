// The id that ties a request's log lines together and comes back as X-Request-Id: the caller's own
// when it is a plausible id, a fresh UUID otherwise (so a header cannot inject text into the logs).
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

const PLAUSIBLE_ID = /^[A-Za-z0-9_.:-]{1,100}$/;

export function requestId(headers: IncomingHttpHeaders): string {
  const given = headers['x-request-id'];
  return typeof given === 'string' && PLAUSIBLE_ID.test(given) ? given : randomUUID();
}
