// An open-loop load: requests sent at a fixed rate whatever the answers (as a crowd arrives), not
// when a connection is free again (as autocannon's connections do, which slows the load down with
// the service and hides an overload). Latency counts from when a request was due, so a request that
// waited for a connection on this side waited for the service too. Also a closed loop over the same
// requests, for the capacity that the open loop's rates are multiples of.
import { createHistogram, RecordableHistogram } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { Latency, latencyOf, tally } from './load';

/** One request of the load, and the class it is counted under. */
export interface Call {
  kind: string;
  method: 'GET' | 'POST';
  path: string;
  body?: string;
  headers?: Record<string, string>;
}

/** Per class of call: answers by status (`timeout` and `error` for none), and the latency of answers other than 503. */
export interface ClassResult {
  sent: number;
  statuses: Record<string, number>;
  latency: Latency | null;
}

export interface LoadOutcome {
  /** Seconds from the first request due to the last answer. */
  elapsedS: number;
  /** Requests sent per second, from the first to the last sent (below the rate asked when this side could not keep up). */
  sentPerS: number;
  byKind: Record<string, ClassResult>;
}

export interface LoadOptions {
  url: string;
  /** The n-th call of the load. */
  call: (n: number) => Call;
  /** Connections the load may open (the crowd's, not the service's bound). */
  connections: number;
  /** A request not answered within this long counts as `timeout`. */
  timeoutMs: number;
  /** Called with every answer (status and body text), e.g. to learn a ticket's id. */
  onAnswer?: (call: Call, status: number, body: string) => void;
}

class Recorder {
  private readonly kinds = new Map<
    string,
    { sent: number; statuses: Record<string, number>; h: RecordableHistogram }
  >();

  sent(kind: string) {
    let k = this.kinds.get(kind);
    if (!k) this.kinds.set(kind, (k = { sent: 0, statuses: {}, h: createHistogram() }));
    k.sent++;
    return k;
  }

  result(): Record<string, ClassResult> {
    return Object.fromEntries(
      [...this.kinds].map(([kind, k]) => [kind, { sent: k.sent, statuses: k.statuses, latency: latencyOf(k.h) }]),
    );
  }
}

async function send(pool: Pool, o: LoadOptions, call: Call, dueAt: number, rec: Recorder): Promise<void> {
  const k = rec.sent(call.kind);
  try {
    const res = await pool.request({
      method: call.method,
      path: call.path,
      body: call.body,
      headers: { ...(call.body !== undefined ? { 'content-type': 'application/json' } : {}), ...call.headers },
      headersTimeout: o.timeoutMs,
      bodyTimeout: o.timeoutMs,
    });
    const text = await res.body.text();
    // A 503's code says whether it was shed (OVERLOADED) or something else (BUSY, UNAVAILABLE).
    tally(k.statuses, res.statusCode === 503 ? `503 ${codeOf(text)}` : String(res.statusCode));
    if (res.statusCode !== 503) k.h.record(Math.max(1, Math.round((performance.now() - dueAt) * 1000)));
    o.onAnswer?.(call, res.statusCode, text);
  } catch (err) {
    const code = (err as { code?: string }).code ?? '';
    tally(k.statuses, /TIMEOUT/.test(code) ? 'timeout' : 'error');
  }
}

function codeOf(text: string): string {
  try {
    const code = (JSON.parse(text) as { code?: unknown }).code;
    return typeof code === 'string' ? code : '?';
  } catch {
    return '?';
  }
}

function pool(o: LoadOptions): Pool {
  return new Pool(o.url, { connections: o.connections, pipelining: 1, keepAliveTimeout: 30_000 });
}

/** `ratePerS` requests a second for `durationS` seconds, each sent when due; resolves when every one is answered or timed out. */
export async function openLoop(o: LoadOptions & { ratePerS: number; durationS: number }): Promise<LoadOutcome> {
  const p = pool(o);
  const rec = new Recorder();
  const inFlight: Array<Promise<void>> = [];
  const total = Math.round(o.ratePerS * o.durationS);
  const start = performance.now();
  let n = 0;
  try {
    let lastSent = start;
    while (n < total) {
      const elapsed = performance.now() - start;
      const due = Math.min(total, Math.floor((elapsed * o.ratePerS) / 1000) + 1);
      for (; n < due; n++) inFlight.push(send(p, o, o.call(n), start + (n * 1000) / o.ratePerS, rec));
      lastSent = performance.now();
      await sleep(1);
    }
    await Promise.all(inFlight);
    const sentS = Math.max((lastSent - start) / 1000, (total - 1) / o.ratePerS);
    return { elapsedS: (performance.now() - start) / 1000, sentPerS: total / sentS, byKind: rec.result() };
  } finally {
    await p.destroy();
  }
}

/** `concurrency` callers, each sending its next request when its last was answered, for `durationS` seconds. */
export async function closedLoop(o: LoadOptions & { concurrency: number; durationS: number }): Promise<LoadOutcome> {
  const p = pool(o);
  const rec = new Recorder();
  const start = performance.now();
  const end = start + o.durationS * 1000;
  let n = 0;
  try {
    await Promise.all(
      Array.from({ length: o.concurrency }, async () => {
        while (performance.now() < end) await send(p, o, o.call(n++), performance.now(), rec);
      }),
    );
    const elapsedS = (performance.now() - start) / 1000;
    return { elapsedS, sentPerS: n / elapsedS, byKind: rec.result() };
  } finally {
    await p.destroy();
  }
}

/** Answers that are not 503 and came in time, over every class. */
export function goodAnswers(r: LoadOutcome): number {
  let n = 0;
  for (const k of Object.values(r.byKind))
    for (const [status, c] of Object.entries(k.statuses)) if (/^\d+$/.test(status) && status !== '503') n += c;
  return n;
}
