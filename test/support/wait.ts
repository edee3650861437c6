// Waiting in the specs: for a state (waitFor), never for a guess of how long something takes on
// this machine. `sleep` (Node's timers/promises) is for pacing what a spec sends, not for waiting
// until something has happened.
import { setTimeout as sleep } from 'node:timers/promises';

export { sleep };

/**
 * Polls `check` every `everyMs` until it returns a truthy value, and returns that value; fails with
 * `what` after `timeoutMs` (a function is asked then, so the message can say what was seen instead).
 * The bound is there to end a spec whose awaited state never comes, not to judge speed: a few
 * tens of seconds, which only a fault reaches.
 */
export async function waitFor<T>(
  what: string | (() => string),
  check: () => Promise<T> | T,
  timeoutMs = 15_000,
  everyMs = 25,
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}`);
    await sleep(everyMs);
  }
}
