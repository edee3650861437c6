// When the waiting page polls next: what Retry-After says, with one exception at the start. Kept
// apart from wait.js so that a browser spec can call it with chosen times.

/** How long after the start the page makes a poll it moved to the start (see nextPollDelayMs). */
export const AFTER_START_MS = 50;

/**
 * Milliseconds until the next poll, from an answer's Retry-After (seconds), the service's time now
 * and the sale's start (epoch ms, or null). As Retry-After says (0 while the place is being drawn:
 * the service holds that poll until the draw), except before the start: a poll
 * that it puts within the first second after the start is made at the start (AFTER_START_MS after
 * it, so that it does not arrive before it). Retry-After counts whole seconds, so without this the
 * buyers the service asked to come at the start, those most likely admitted first, would come
 * anywhere in that second; the service answers a poll that comes before its draw as soon as the
 * draw and the first admission are made.
 */
export function nextPollDelayMs(retryAfterS, now, startsAt) {
  const ms = Math.max(0, retryAfterS) * 1000;
  if (startsAt === null || now >= startsAt) return ms;
  const at = now + ms;
  return at >= startsAt && at < startsAt + 1000 ? startsAt - now + AFTER_START_MS : ms;
}
