// Drives POST /orders with autocannon's programmatic API: every request carries a userId of its
// own. Answers are counted per status code here and only 201 latencies go into the percentiles:
// autocannon's own histogram would mix in every 2xx and its rate counts refusals as throughput.
// A GET (the GET /health/live floor) goes through the same counting, its success status being 200.
import { createHistogram, RecordableHistogram } from 'node:perf_hooks';
import autocannon from 'autocannon';

export interface LoadSpec {
  url: string;
  /** POST /orders for this product, ... */
  productId?: number;
  /** Prefix of this load's userIds; a counter makes each one unique. */
  userPrefix?: string;
  /** ... or GET this path instead (no body). */
  get?: string;
  /** POST to this path instead of /orders (the waiting room's joins), with the same bodies. */
  post?: string;
  /** The n-th POST /orders body, instead of `{ userId: <prefix><n>, productId }` (the door's loads: holders asking again, one user). */
  bodyOf?: (n: number) => string;
  /** Headers of the n-th POST /orders (a buyer token of its own). */
  headersOf?: (n: number) => Record<string, string>;
  /**
   * Fixed POST /orders bodies, sent in turn on each connection: built once by autocannon, so the
   * load generator (on the same cores) spends far less per request than with a body per request.
   */
  bodies?: string[];
  /** The answer that counts and whose latency is kept (default 201). */
  okStatus?: number;
  connections: number;
  /** Seconds of load (steady state), or ... */
  durationS?: number;
  /** ... a fixed number of requests, one per distinct buyer (the sale); ends when all are answered. */
  amount?: number;
  /** autocannon's per-request timeout, in seconds. */
  timeoutS: number;
  /** Called with every answer's status, body and headers as it arrives (the order, for a 201 to POST /orders). */
  onAnswer?: (status: number, body: string, headers: Record<string, string | undefined>) => void;
  /** Asked after every answer; true ends the load early (within autocannon's 200 ms tick) and resolves as usual. */
  stopWhen?: () => boolean;
  label: string;
  progress?: (line: string) => void;
  signal?: AbortSignal;
}

/** Longer than the longest an order may wait for a lock, so a slow 201 is not cut off as a timeout. */
export function autocannonTimeoutS(lockWaitMs: number): number {
  return Math.ceil(lockWaitMs / 1000) + 15;
}

export type Latency = NonNullable<ReturnType<typeof latencyOf>>;

/** Node's own HDR histogram holds whole numbers, so latencies are recorded in microseconds. */
export function latencyOf(h: RecordableHistogram) {
  if (h.count === 0) return null;
  const ms = (us: number) => us / 1000;
  return { p50: ms(h.percentile(50)), p99: ms(h.percentile(99)), max: ms(h.max), mean: ms(h.mean) };
}

/** The value at quantile `q` (0 < q <= 1) of values sorted ascending, by nearest rank. */
export const nearestRank = (sorted: number[], q: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];

/** Counts one more `key` (an answer's status) in `counts`. */
export function tally(counts: Record<string, number>, key: string, n = 1): void {
  counts[key] = (counts[key] ?? 0) + n;
}

/** Status counts added up. */
export function addCounts(...all: Array<Record<string, number>>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const c of all) for (const [k, n] of Object.entries(c)) tally(out, k, n);
  return out;
}

/** Latencies of parts measured at different times: p50 and mean averaged, p99 and max the worst part's. */
export function mergeLatency(parts: Array<Latency | null>): Latency | null {
  const l = parts.filter((x): x is Latency => x !== null);
  if (l.length === 0) return null;
  const mean = (f: (x: Latency) => number) => l.reduce((n, x) => n + f(x), 0) / l.length;
  return {
    p50: mean((x) => x.p50),
    p99: Math.max(...l.map((x) => x.p99)),
    max: Math.max(...l.map((x) => x.max)),
    mean: mean((x) => x.mean),
  };
}

export type LoadResult = Awaited<ReturnType<typeof runLoad>>;

export async function runLoad(spec: LoadSpec) {
  if (spec.signal?.aborted) throw new Error('aborted');
  let issued = 0;
  const okStatus = spec.okStatus ?? 201;
  const statusCounts: Record<string, number> = {};
  const latencies = createHistogram();
  let responses = 0;
  let created = 0;
  let lastCreatedAt = 0;
  let lastAnswerAt = 0;
  let stopping = false;
  const started = Date.now();

  // A line per second on stderr: a long run should never look hung.
  let lastCreated = 0;
  let lastResponses = 0;
  const ticker = setInterval(() => {
    const t = Math.round((Date.now() - started) / 1000);
    const other = Object.entries(statusCounts)
      .filter(([c]) => c !== String(okStatus))
      .map(([c, n]) => `${c}:${n}`)
      .join(' ');
    spec.progress?.(
      `  ${spec.label} ${t}s  ${okStatus}/s ${created - lastCreated}  answers/s ${responses - lastResponses}  total ${okStatus} ${created}${other ? `  other ${other}` : ''}`,
    );
    lastCreated = created;
    lastResponses = responses;
  }, 1000);
  ticker.unref();

  // Declared before autocannon() because it may call back synchronously (a bad option).
  let instance: autocannon.Instance | undefined;
  const onAbort = () => instance?.stop();
  spec.signal?.addEventListener('abort', onAbort, { once: true });

  // A fresh object per request template: autocannon may fill in its headers.
  const post = () => ({
    method: 'POST' as const,
    path: spec.post ?? '/orders',
    headers: { 'content-type': 'application/json' },
  });
  const [result, endedAt] = await new Promise<[autocannon.Result, number]>((resolve, reject) => {
    const running = (instance = autocannon(
      {
        url: spec.url,
        connections: Math.min(spec.connections, spec.amount ?? Infinity),
        // autocannon rejects an undefined duration, so pass only the one that applies.
        ...(spec.amount ? { amount: spec.amount } : { duration: spec.durationS ?? 10 }),
        timeout: spec.timeoutS,
        // autocannon notices the end (duration, or every answer in) on this tick; 1 s would overshoot.
        sampleInt: 200,
        requests: spec.get
          ? [{ method: 'GET', path: spec.get }]
          : spec.bodies
            ? spec.bodies.map((body) => ({ ...post(), body }))
            : [
                {
                  ...post(),
                  // Called for every request (not just once per connection), so no userId repeats.
                  setupRequest: (req) => {
                    const n = issued++;
                    return {
                      ...req,
                      body: spec.bodyOf
                        ? spec.bodyOf(n)
                        : JSON.stringify({ userId: `${spec.userPrefix ?? 'u'}${n}`, productId: spec.productId }),
                      ...(spec.headersOf ? { headers: { ...req.headers, ...spec.headersOf(n) } } : {}),
                    };
                  },
                  // Only where asked for: autocannon reads every body anyway, this hands it over.
                  ...(spec.onAnswer
                    ? {
                        onResponse: (status, body, _context, headers) =>
                          spec.onAnswer?.(status, body, (headers ?? {}) as Record<string, string | undefined>),
                      }
                    : {}),
                },
              ],
      },
      (err, result) => {
        clearInterval(ticker);
        spec.signal?.removeEventListener('abort', onAbort);
        if (err) reject(err instanceof Error ? err : new Error(String(err)));
        else resolve([result, Date.now()]);
      },
    ));

    running.on('response', (_client, statusCode, _bytes, responseTime) => {
      responses++;
      lastAnswerAt = Date.now();
      tally(statusCounts, String(statusCode));
      if (statusCode === okStatus) {
        created++;
        latencies.record(Math.max(1, Math.round(responseTime * 1000)));
        lastCreatedAt = lastAnswerAt;
      }
      if (spec.stopWhen && !stopping && spec.stopWhen()) {
        stopping = true;
        running.stop();
      }
    });
  });
  if (spec.signal?.aborted) throw new Error('aborted');
  const end = spec.amount ? lastAnswerAt || endedAt : endedAt;
  return {
    /** Date.now() when the load started. */
    startedAtMs: started,
    /** Seconds of load (durationS), or from the first request to the last answer (amount). */
    elapsedS: (end - started) / 1000,
    statusCounts,
    responses,
    /** Answers with okStatus: 201 for orders, 200 for GET /health/live, 410 for a sold-out product. */
    created,
    /** Milliseconds from the start to the last 201 (for the sale: the time to sell out). */
    lastCreatedAtMs: created > 0 ? lastCreatedAt - started : null,
    latency201: latencyOf(latencies),
    /** Connection errors and timeouts as autocannon counts them. */
    errors: result.errors,
    timeouts: result.timeouts,
  };
}
