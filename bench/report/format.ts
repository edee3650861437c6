// How the report writes a figure, a ratio, a layout or a verdict, and the names it gives the locking
// modes and Redis setups: shared by every section, so the console table and latest.md say a thing
// the same way.
import type { RedisSetup, ScenarioResult, Spread, StockLocking } from '../types';

export const MODE_NAME: Record<StockLocking, string> = {
  redlock: 'Redlock segments',
  database: 'bare peer, no lock (PG row lock)',
};

export function ms(n: number | undefined | null): string {
  if (n === undefined || n === null || !Number.isFinite(n)) return '-';
  return n >= 100 ? n.toFixed(0) : n.toFixed(1);
}
/** A figure per second: as `ms` writes a time. */
export const rate = (n: number) => ms(n);
export const ratio = (a: number | undefined, b: number | undefined) => times(ratioOf(a, b));
/** `20 x 50` for an even split; the service spreads any remainder, so just the count otherwise. */
export function layout(r: { segments: number; stock: number }): string {
  return r.stock % r.segments === 0
    ? `${r.segments} x ${r.stock / r.segments}`
    : `${r.segments} segments, ${r.stock} units`;
}
/** `code:count` by code; `name` writes a code. */
const counted = (c: Record<string, number>, name = (k: string) => k) =>
  Object.entries(c)
    .sort(([a], [b]) => Number(a) - Number(b))
    .map(([k, n]) => `${name(k)}:${n}`)
    .join(' ');
export const codes = (r: ScenarioResult) => counted(r.statusCounts);
export function spreadMs(x: Spread | null): string {
  return x ? `${ms(x.p50)} / ${ms(x.p99)} / ${ms(x.max)} ms` : '-';
}
export function seconds(n: number | null): string {
  return n === null || !Number.isFinite(n) ? '-' : `${(n / 1000).toFixed(2)} s`;
}
export const countsText = (c: Record<string, number>) => counted(c, (k) => (k === '0' ? 'no answer' : k)) || '-';

export function statusWord(r: ScenarioResult): string {
  return r.status === 'ok' ? 'ok' : '**FAILED**';
}

/** How long each steady scenario ran: its seconds, or its requests when the run sent a fixed number (requests). */
export function steadyLength(s: { durationS: number; requests?: number | null }): string {
  return s.requests ? `${s.requests} requests` : `${s.durationS} s`;
}

/** ORDER_BATCH_MAX as run: a number, or the service's default when the run left it unset. */
export function batchName(b: number | null): string {
  return b === null ? 'service default' : String(b);
}
/** The hold beside every figure: with group commit one hold serves many orders, so say per what it is spent. */
export function holdName(h: number): string {
  return h === 0 ? '0' : `${h} ms, once per lock hold`;
}

export function metricCell(r: ScenarioResult): { busy: string; fall: string; wait: string } {
  const m = r.metrics;
  // The no-lock mode takes no Redis lock, so its lock counters stay 0 by construction, not by merit; the bare peers have none.
  if (r.locking !== 'redlock' || r.target !== 'service') return { busy: 'n/a', fall: 'n/a', wait: 'n/a' };
  if (m.source === 'unavailable' || m.lockBusy === null) return { busy: '-', fall: '-', wait: '-' };
  const mark = m.source === 'partial' ? '*' : '';
  return {
    busy: `${m.lockBusy}${mark}`,
    fall: `${m.falloversBusy}/${m.falloversEmpty}${mark}`,
    wait: m.lockWaitCount ? `${m.lockWaitCount} x ${ms(m.lockWaitMeanMs)} ms${mark}` : `0${mark}`,
  };
}

export const ratioOf = (a: number | null | undefined, b: number | null | undefined): number | null =>
  a === null || a === undefined || b === null || b === undefined || !(b > 0) || !Number.isFinite(a) ? null : a / b;

export const SETUP_NAME: Record<RedisSetup, string> = {
  single: 'one redis-server',
  quorum: 'Redlock quorum of 3',
  cluster: 'Redis Cluster, 3 masters',
};
export const times = (x: number | null) => (x === null ? '-' : `${x.toFixed(2)}x`);
