// The arithmetic of the operator page's live figures, apart from where they come from: counters of
// one process as flat fields, the change since the last flush, and the sum of many processes'
// per-second records into rates and order-latency percentiles.

/** Cumulative counters of one process, by field: `o:<outcome>`, `rl`, `fo:<reason>`, `lw:n`, `lw:ms`, `dep:<dependency>`, `b:<le>`, `sh:<class>` (calls shed); in a second's record also `lag:<process>` (its event-loop delay, ms). */
export type Counters = Record<string, number>;

/** What grew since `before` (fields that did not, left out). */
export function deltas(before: Counters, now: Counters): Counters {
  const out: Counters = {};
  for (const [field, value] of Object.entries(now)) {
    const d = value - (before[field] ?? 0);
    if (d > 0) out[field] = d;
  }
  return out;
}

/** One second of the whole deployment: every process's deltas added up. */
export interface SecondRecord {
  at: number;
  fields: Counters;
}

export interface LiveSeries {
  /** Unix seconds, oldest first. */
  at: number[];
  created: number[];
  /** Every refusal answered (4xx codes of POST /orders), 429s apart. */
  refused: number[];
  rateLimited: number[];
  errors: number[];
  lockWaits: number[];
  fallovers: number[];
  /** Calls shed with 503 OVERLOADED, every class. */
  shed: number[];
  /** The slowest process's event-loop delay, ms (null: no process reported it that second). */
  eventLoopDelayMs: Array<number | null>;
}

export interface LiveSummary {
  series: LiveSeries;
  /** Over the last `windowS` seconds. */
  windowS: number;
  ordersPerS: number;
  refusalsPerS: number;
  p50Ms: number | null;
  p99Ms: number | null;
  lockWaitMeanMs: number | null;
  byCode: Record<string, number>;
  fallovers: Record<string, number>;
  dependencyErrors: Record<string, number>;
  shedPerS: number;
  /** Calls shed in the window, by class (join, order, settle). */
  shedByClass: Record<string, number>;
  /** The slowest process's event-loop delay over the window, ms. */
  eventLoopDelayMs: number | null;
  /** Processes that wrote a record in the window. */
  processes: number;
}

const SERVER_ERRORS = new Set(['BUSY', 'UNAVAILABLE', 'OUTCOME_UNKNOWN', 'INTERNAL']);

/** Rates and percentiles from per-second records (missing seconds count as quiet ones). */
export function summarise(records: SecondRecord[], from: number, to: number, windowS: number): LiveSummary {
  const byAt = new Map(records.map((r) => [r.at, r.fields]));
  const series: LiveSeries = {
    at: [],
    created: [],
    refused: [],
    rateLimited: [],
    errors: [],
    lockWaits: [],
    fallovers: [],
    shed: [],
    eventLoopDelayMs: [],
  };
  const recent: Counters = {};
  let delayMs: number | null = null;
  const processes = new Set<string>();
  for (let at = from; at <= to; at++) {
    const f = byAt.get(at) ?? {};
    let refused = 0;
    let errors = 0;
    let fallovers = 0;
    let shed = 0;
    let lag: number | null = null;
    for (const [field, n] of Object.entries(f)) {
      if (field.startsWith('lag:')) {
        lag = Math.max(lag ?? 0, n);
        continue;
      }
      if (field.startsWith('sh:')) shed += n;
      if (field.startsWith('o:') && field !== 'o:created') {
        if (SERVER_ERRORS.has(field.slice(2))) errors += n;
        else refused += n;
      }
      if (field.startsWith('fo:')) fallovers += n;
      if (at > to - windowS) {
        if (field.startsWith('p:')) processes.add(field);
        else recent[field] = (recent[field] ?? 0) + n;
      }
    }
    series.at.push(at);
    series.created.push(f['o:created'] ?? 0);
    series.refused.push(refused);
    series.rateLimited.push(f.rl ?? 0);
    series.errors.push(errors);
    series.lockWaits.push(f['lw:n'] ?? 0);
    series.fallovers.push(fallovers);
    series.shed.push(shed);
    series.eventLoopDelayMs.push(lag);
    if (lag !== null && at > to - windowS) delayMs = Math.max(delayMs ?? 0, lag);
  }
  const pick = (prefix: string) =>
    Object.fromEntries(
      Object.entries(recent)
        .filter(([k]) => k.startsWith(prefix))
        .map(([k, v]) => [k.slice(prefix.length), v]),
    );
  const byCode = pick('o:');
  const created = byCode.created ?? 0;
  const refusals = Object.entries(byCode)
    .filter(([code]) => code !== 'created' && !SERVER_ERRORS.has(code))
    .reduce((n, [, v]) => n + v, 0);
  const waits = recent['lw:n'] ?? 0;
  return {
    series,
    windowS,
    ordersPerS: created / windowS,
    refusalsPerS: refusals / windowS,
    p50Ms: quantileMs(pick('b:'), 0.5),
    p99Ms: quantileMs(pick('b:'), 0.99),
    lockWaitMeanMs: waits > 0 ? (recent['lw:ms'] ?? 0) / waits : null,
    byCode,
    fallovers: pick('fo:'),
    dependencyErrors: pick('dep:'),
    shedPerS: Object.values(pick('sh:')).reduce((a, b) => a + b, 0) / windowS,
    shedByClass: pick('sh:'),
    eventLoopDelayMs: delayMs,
    processes: processes.size,
  };
}

/**
 * The q-quantile of a cumulative histogram (`le` in seconds -> count at or below), in milliseconds,
 * interpolated inside its bucket as Prometheus's histogram_quantile does; null with no observation.
 */
export function quantileMs(buckets: Record<string, number>, q: number): number | null {
  const rows = Object.entries(buckets)
    .map(([le, n]) => ({ le: le === '+Inf' ? Infinity : Number(le), n }))
    .sort((a, b) => a.le - b.le);
  const total = rows.find((r) => r.le === Infinity)?.n ?? rows[rows.length - 1]?.n ?? 0;
  if (total === 0) return null;
  const rank = q * total;
  let prevLe = 0;
  let prevN = 0;
  for (const r of rows) {
    if (r.n >= rank) {
      if (r.le === Infinity) return prevLe * 1000;
      const inBucket = r.n - prevN;
      const share = inBucket === 0 ? 0 : (rank - prevN) / inBucket;
      return (prevLe + (r.le - prevLe) * share) * 1000;
    }
    prevLe = r.le;
    prevN = r.n;
  }
  return prevLe * 1000;
}
