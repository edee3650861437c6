// The service against the bare peers (and GET /health/live, and the sold-out refusals) at hold 0:
// the rows, the ratios between them, and their console and latest.md tables.
import { BARE_HELD_MS, BenchmarkReport, ScenarioResult } from '../types';
import { findFast, findHealth, findPeer, findSoldOut } from './find';
import { batchName, codes, ms, rate, ratio, statusWord, steadyLength } from './format';

export function speedRows(report: BenchmarkReport) {
  const s = report.settings;
  const n = s.speedSegments;
  const w = `${s.speedWorkers} process${s.speedWorkers === 1 ? '' : 'es'}`;
  const bare = (segments: number, holdMs = 0) => findPeer(report, 'bare', 'redlock', segments, holdMs);
  // The unit where it is not orders/s.
  const rows: Array<[string, ScenarioResult | undefined, ('req/s' | '410/s')?]> = [
    [`service (${w}), Redlock segments, ORDER_BATCH_MAX=1`, findFast(report, { batchMax: 1 })],
    [
      `service (${w}), Redlock segments, group commit (ORDER_BATCH_MAX ${batchName(s.batchMax)})`,
      findFast(report, { batchMax: s.batchMax }),
    ],
    [`service (${w}), one lock (1 segment), ORDER_BATCH_MAX=1`, findFast(report, { segments: 1, batchMax: 1 })],
    [`service (${w}), GET /health/live (no work at all)`, findHealth(report), 'req/s'],
    [`service (${w}), sold-out product: refusals (410) to distinct buyers`, findSoldOut(report), '410/s'],
    ['bare peer, Redis segment locks', bare(n)],
    ['bare peer, no Redis lock (PostgreSQL row locks only)', findPeer(report, 'bare', 'database', n)],
    ['bare peer, one lock (1 segment)', bare(1)],
    ['bare-lua peer: stock in Redis, one Lua script, one INSERT', findPeer(report, 'bare-lua', 'lua', n)],
    [`bare peer, one lock (1 segment), lock held ${BARE_HELD_MS} ms`, bare(1, BARE_HELD_MS)],
    [`bare peer, Redis segment locks, lock held ${BARE_HELD_MS} ms`, bare(n, BARE_HELD_MS)],
  ];
  return rows.flatMap(([what, r, unit]) => (r ? [{ what, r, unit: unit ?? 'orders/s' }] : []));
}

/** The service against each peer, as ratios of this run's figures. */
export function speedRatios(report: BenchmarkReport): Array<{ what: string; value: string }> {
  const s = report.settings;
  const n = s.speedSegments;
  const one = findFast(report, { batchMax: 1 });
  const group = findFast(report, { batchMax: s.batchMax });
  const bare = (segments: number, holdMs = 0) => findPeer(report, 'bare', 'redlock', segments, holdMs);
  const lua = findPeer(report, 'bare-lua', 'lua', n);
  const pairs: Array<[string, ScenarioResult | undefined, ScenarioResult | undefined]> = [
    ['service ORDER_BATCH_MAX=1 / bare peer (Redis segment locks)', one, bare(n)],
    ['service group commit / bare peer (Redis segment locks)', group, bare(n)],
    ['service ORDER_BATCH_MAX=1 / bare-lua peer', one, lua],
    ['service group commit / bare-lua peer', group, lua],
    ['service one lock / bare peer one lock', findFast(report, { segments: 1, batchMax: 1 }), bare(1)],
    [`bare peer, lock held ${BARE_HELD_MS} ms: ${n} segments / one lock`, bare(n, BARE_HELD_MS), bare(1, BARE_HELD_MS)],
    ['service ORDER_BATCH_MAX=1 orders/s / service GET /health/live req/s', one, findHealth(report)],
  ];
  return pairs.flatMap(([what, a, b]) => (a && b ? [{ what, value: ratio(a.ordersPerSec, b.ordersPerSec) }] : []));
}

export function speedMarkdown(report: BenchmarkReport): string[] {
  const s = report.settings;
  const speed = speedRows(report);
  if (speed.length === 0) return [];
  const ratios = speedRatios(report);
  return [
    `## The service against the bare peers (hold 0 unless a row says otherwise, ${s.speedSegments} segments)`,
    '',
    `Same load for every row: ${s.connections} connections, ${steadyLength(s)}, a fresh product of ${s.steadyStock.toLocaleString('en-US')} units in ${s.speedSegments} segments (1 for the one-lock rows), nothing held in the lock (the bare peer's two "lock held" rows hold each lock ${BARE_HELD_MS} ms: the segments-against-one-lock target's floor on this machine). The service runs as WORKERS=${s.speedWorkers}; each peer is one process. ` +
      "The bare peer is the service's order algorithm (user lock, random segment, fall over, one SQL statement inside a Redis segment lock) on plain node:http, ioredis and pg: the floor of what the service's own code costs. " +
      'The bare-lua peer holds the stock in Redis, checks and decrements it and records the buyer in one Lua script, then INSERTs the order: the design many shops pick instead. GET /health/live is the service answering with no work at all. ' +
      `The sold-out row is a product of ${s.speedSegments} units in ${s.speedSegments} segments, sold out (and its sold-out flag set) before the load; every request is a new buyer and every answer must be 410: the refusals that are most of a big sale's traffic, latencies of the 410s.`,
    '',
    '| what | orders/s | p50 | p99 | max | answers | verified |',
    '|---|--:|--:|--:|--:|---|---|',
    ...speed.map(
      ({ what, r: x, unit }) =>
        `| ${what} | **${rate(x.ordersPerSec)}**${unit === 'orders/s' ? '' : ` ${unit}`} | ${ms(x.latency201Ms?.p50)} | ${ms(x.latency201Ms?.p99)} | ${ms(x.latency201Ms?.max)} | ${codes(x)}${x.errors ? ` err:${x.errors}` : ''}${x.timeouts ? ` timeouts:${x.timeouts}` : ''} | ${statusWord(x)} |`,
    ),
    '',
    ...(ratios.length > 0
      ? [
          '| ratio, this run | value |',
          '|---|--:|',
          ...ratios.map(({ what, value }) => `| ${what} | **${value}** |`),
          '',
        ]
      : []),
  ];
}
