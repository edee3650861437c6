// Solves a proof-of-work challenge (altcha's v1 scheme) with altcha-lib's own worker script, served
// by this service: up to MAX_WORKERS workers, each searching its share of 0..maxnumber, the first to
// find the number ends them all. Used by the waiting page, and by bench/pow.ts to time the steps.
const MAX_WORKERS = 4;

/** Finds the challenge's secret number with up to MAX_WORKERS workers, each over its own share of the range. */
export function solve(ch, workerUrl = '/wait/assets/worker.js') {
  const count = Math.max(1, Math.min(MAX_WORKERS, navigator.hardwareConcurrency || 2));
  const share = Math.ceil((ch.maxnumber + 1) / count);
  return new Promise((resolve, reject) => {
    const workers = [];
    let pending = count;
    const stop = () => workers.forEach((w) => w.terminate());
    for (let i = 0; i < count; i++) {
      const w = new Worker(workerUrl, { type: 'module' });
      workers.push(w);
      w.onmessage = (e) => {
        if (e.data && typeof e.data.number === 'number') {
          stop();
          resolve(e.data.number);
        } else if (--pending === 0) {
          stop();
          reject(new Error('the challenge had no solution'));
        }
      };
      w.onerror = () => {
        stop();
        reject(new Error('this browser could not run the check'));
      };
      const start = i * share;
      w.postMessage({
        type: 'work',
        payload: {
          algorithm: ch.algorithm,
          challenge: ch.challenge,
          salt: ch.salt,
          start,
          max: Math.min(ch.maxnumber, start + share - 1),
        },
      });
    }
  });
}
