// Reads the service's Prometheus counters around a scenario and turns them into per-scenario
// deltas. With WORKERS > 1 every worker keeps its own prom-client registry, and one GET /metrics
// reaches one worker, so the deltas are checked against the orders PostgreSQL really holds and
// labelled with how complete they are.
import http from 'node:http';
import { request } from './http';
import { addCounts } from './load';

/** One sample line: name, labels, value. Only what the benchmark reads is kept. */
export type Samples = Record<string, number>;

export type MetricsSource =
  /** One scrape already covered every worker (one process, or aggregation in the service). */
  | 'all-workers'
  /** Per-worker registries, one scrape per worker (the cluster hands new connections round-robin), summed. */
  | 'summed-per-worker'
  /** The counters cover only part of the traffic; the figures are one worker's. */
  | 'partial'
  | 'unavailable';

type Deltas = { [K in keyof ReturnType<typeof deltasOf>]: number | null };
/** The counters' deltas over a scenario (deltasOf), each null where not read, and where they came from. */
export type MetricDeltas = { source: MetricsSource; note: string } & Deltas;

const WANTED = [
  'flashsale_orders_total',
  'flashsale_segment_lock_busy_total',
  'flashsale_segment_fallovers_total',
  'flashsale_lock_wait_seconds_sum',
  'flashsale_lock_wait_seconds_count',
  'flashsale_sold_out_short_circuits_total',
  'flashsale_in_process_refusals_total',
];

/** Parses the lines of the wanted families; key = `name{labels as printed}`. */
export function parsePrometheus(text: string): Samples {
  const out: Samples = {};
  for (const line of text.split('\n')) {
    const m = line.match(/^([^{\s]+)(\{[^}]*\})?\s+(\S+)/);
    if (!m || !WANTED.includes(m[1])) continue;
    const value = Number(m[3]);
    if (!Number.isFinite(value)) continue;
    // prom-client may print labels in any order; sort them so keys compare across scrapes.
    const labels = (m[2] ?? '')
      .replace(/^\{|\}$/g, '')
      .split(/,(?=[a-zA-Z_]+=")/)
      .filter(Boolean)
      .sort()
      .join(',');
    out[labels ? `${m[1]}{${labels}}` : m[1]] = value;
  }
  return out;
}

// No keep-alive: a new connection per scrape, so the cluster's round-robin moves to the next worker.
const fresh = new http.Agent({ keepAlive: false });

/** Scrapes /metrics once per worker, one after another, each on a fresh connection (with per-worker registries, each scrape is one worker's view). */
export async function snapshot(baseUrl: string, workers: number): Promise<Samples[] | null> {
  const scrapes: Samples[] = [];
  try {
    for (let i = 0; i < workers; i++) {
      const r = await request(fresh, baseUrl, 'GET', '/metrics', undefined, { connection: 'close' }, 5000);
      if (r.status !== 200) throw new Error(`GET /metrics: HTTP ${r.status}`);
      scrapes.push(parsePrometheus(r.text));
    }
  } catch {
    return null;
  }
  return scrapes;
}

const sumOf = (s: Samples, name: string, label = '') =>
  Object.entries(s)
    .filter(([key]) => key.split('{')[0] === name && key.includes(label))
    .reduce((t, [, v]) => t + v, 0);

function deltasOf(before: Samples, after: Samples) {
  const d = (name: string, label?: string) => sumOf(after, name, label) - sumOf(before, name, label);
  const waitCount = d('flashsale_lock_wait_seconds_count');
  const waitSum = d('flashsale_lock_wait_seconds_sum');
  return {
    ordersCreated: d('flashsale_orders_total', 'outcome="created"'),
    lockBusy: d('flashsale_segment_lock_busy_total'),
    falloversBusy: d('flashsale_segment_fallovers_total', 'reason="busy"'),
    falloversEmpty: d('flashsale_segment_fallovers_total', 'reason="empty"'),
    /** Orders that had to wait for a busy segment lock, and their mean wait. */
    lockWaitCount: waitCount,
    lockWaitMeanMs: waitCount > 0 ? (waitSum / waitCount) * 1000 : 0,
    /** SOLD_OUT answers (410), however the service learnt it: from the Redis flag (no lock, no stock read), or from the door's memory. */
    soldOut: d('flashsale_orders_total', 'outcome="SOLD_OUT"'),
    soldOutShortCircuits: d('flashsale_sold_out_short_circuits_total'),
    soldOutInProcess: d('flashsale_in_process_refusals_total', 'code="SOLD_OUT"'),
  };
}

const EMPTY = Object.fromEntries(Object.keys(deltasOf({}, {})).map((k) => [k, null])) as Deltas;

/** For a scenario with no counters to read (a peer, GET /health/live); `why` goes into the report. */
export function noMetrics(why: string): MetricDeltas {
  return { source: 'unavailable', note: why, ...EMPTY };
}

/**
 * Picks the reading whose created-orders delta matches the orders PostgreSQL holds for the
 * scenario's product (only that product had traffic): one scrape (aggregated or one process) or
 * the sum over one scrape per worker. Anything else is labelled partial, not scaled up.
 */
export function scenarioDeltas(before: Samples[] | null, after: Samples[] | null, ordersInDb: number): MetricDeltas {
  if (!before || !after || before.length === 0 || after.length === 0) return noMetrics('GET /metrics did not answer');
  const close = (n: number) => Math.abs(n - ordersInDb) <= Math.max(1, ordersInDb * 0.005);
  const single = deltasOf(before[0], after[0]);
  if (close(single.ordersCreated)) {
    return { source: 'all-workers', note: `one scrape covers all ${ordersInDb} orders`, ...single };
  }
  if (before.length > 1) {
    const summed = deltasOf(addCounts(...before), addCounts(...after));
    if (close(summed.ordersCreated)) {
      return {
        source: 'summed-per-worker',
        note: `per-worker counters, ${before.length} scrapes summed = ${summed.ordersCreated} of ${ordersInDb} orders`,
        ...summed,
      };
    }
  }
  // A one-worker view is still useful for the shape (busy vs empty fallovers), as long as it says so.
  const share = ordersInDb > 0 ? single.ordersCreated / ordersInDb : 0;
  if (single.ordersCreated >= 0 && share <= 1) {
    return {
      source: 'partial',
      note: `one worker's counters: ${single.ordersCreated} of ${ordersInDb} orders (${(share * 100).toFixed(0)}%)`,
      ...single,
    };
  }
  return noMetrics(`counters inconsistent with PostgreSQL (${single.ordersCreated} vs ${ordersInDb} orders)`);
}
