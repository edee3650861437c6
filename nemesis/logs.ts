// What the service processes said about their locks, read from their logs (which outlive a
// SIGKILL, unlike their metrics): each write PostgreSQL refused for a stale fencing token, and each
// lock hold that outlived its lease (its extension failed), by reason, with when it was said.
import { existsSync, readFileSync } from 'node:fs';

export interface LockLines {
  /** Per service: when (ms since the epoch, its own clock) each refusal of a stale token was logged. */
  refusals: Record<string, number[]>;
  /** Per service: each hold that outlived its lease, with its reason. */
  lost: Record<string, Array<{ at: number; reason: string }>>;
}

/** Reads `files` (service name -> log file): pino's JSON lines, or plain lines without a time. */
export function lockLines(files: Record<string, string>): LockLines {
  const out: LockLines = { refusals: {}, lost: {} };
  for (const [service, file] of Object.entries(files)) {
    out.refusals[service] = [];
    out.lost[service] = [];
    if (!existsSync(file)) continue;
    for (const line of readFileSync(file, 'utf8').split('\n')) {
      if (!line.includes('stale write refused') && !line.includes('lost before its holder')) continue;
      let at = 0;
      try {
        at = Number((JSON.parse(line) as { time?: number }).time ?? 0);
      } catch {
        /* not JSON: no time */
      }
      if (/stale write refused: segment \d+ of product \d+/.test(line)) out.refusals[service].push(at);
      const lost = /lock lock:stock:\d+:\d+ lost before its holder let it go \((\w+)\)/.exec(line);
      if (lost) out.lost[service].push({ at, reason: lost[1] });
    }
  }
  return out;
}

/** The fault windows the lock lines are read against. */
export interface FaultWindow {
  kind: string;
  target: string;
  startedAt: number;
  endedAt: number;
}

const REDIS_LOSSES = new Set(['redis-restart', 'redis-flush', 'redis-clock', 'cluster-failover']);

export interface LockCounts {
  /** Writes PostgreSQL refused for a stale fencing token. */
  staleWritesRefused: number;
  /**
   * The refusals by their likely cause, read from the faults around them: within 5 s after a pause
   * of the refusing process (it woke holding a lock that had lapsed and been taken), within 30 s of a
   * Redis master losing its keys (a counter set back hands out tokens below the fence until raised),
   * or neither.
   */
  refusedAfter: { ownPause: number; redisLoss: number; other: number };
  /** Lock holds that outlived their lease (a failed extension), by reason. */
  holdsLost: Record<string, number>;
}

export function lockCounts(lines: LockLines, faults: FaultWindow[]): LockCounts {
  const counts: LockCounts = {
    staleWritesRefused: 0,
    refusedAfter: { ownPause: 0, redisLoss: 0, other: 0 },
    holdsLost: {},
  };
  for (const [service, times] of Object.entries(lines.refusals)) {
    for (const at of times) {
      counts.staleWritesRefused++;
      const within = (f: FaultWindow, before: number, after: number) =>
        at >= f.startedAt - before && at <= f.endedAt + after;
      if (faults.some((f) => f.kind === 'pause' && f.target === service && within(f, 0, 5000)))
        counts.refusedAfter.ownPause++;
      else if (faults.some((f) => REDIS_LOSSES.has(f.kind) && within(f, 0, 30_000))) counts.refusedAfter.redisLoss++;
      else counts.refusedAfter.other++;
    }
  }
  for (const list of Object.values(lines.lost))
    for (const l of list) counts.holdsLost[l.reason] = (counts.holdsLost[l.reason] ?? 0) + 1;
  return counts;
}
