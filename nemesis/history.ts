// The history of a run, as JSON lines: every operation's invocation and completion (ok, refused with
// its code, failed, unknown) with its time, every fault's start and end, and notes (phases of the
// run). The checker reads it back with the database's final state; nothing else is needed to check
// a run again later (`npm run nemesis -- --check <run folder>`).
import { createWriteStream, readFileSync, WriteStream } from 'node:fs';

/**
 * ok: the service said it was done. refused: it answered that nothing happened (a 4xx, or 503
 * BUSY / UNAVAILABLE, with its code). failed: the request never reached it (connection refused).
 * unknown: it may or may not have happened (no answer in time, a connection reset after the
 * request left, 503 OUTCOME_UNKNOWN, a 500).
 */
export type Outcome = 'ok' | 'refused' | 'failed' | 'unknown';

export type OpName =
  'order' | 'pay' | 'cancel' | 'read' | 'join' | 'poll' | 'restock' | 'rebalance' | 'pause' | 'resume' | 'create';

export interface Invoke {
  type: 'invoke';
  op: number;
  /** Milliseconds since the run began (the nemesis's monotonic clock). */
  t: number;
  /** Wall clock, ms since the epoch (this machine's; PostgreSQL's clock is the same one). */
  at: number;
  proc: string;
  f: OpName;
  /** The service process the request went to. */
  node: string;
  args: Record<string, unknown>;
}

export interface Complete {
  type: 'complete';
  op: number;
  t: number;
  at: number;
  proc: string;
  f: OpName;
  outcome: Outcome;
  status: number;
  code?: string;
  error?: string;
  value?: Record<string, unknown>;
}

export interface FaultEvent {
  type: 'fault';
  phase: 'start' | 'end';
  id: number;
  t: number;
  at: number;
  kind: string;
  target: string;
  params: Record<string, unknown>;
  error?: string;
}

export interface Note {
  type: 'note';
  t: number;
  at: number;
  what: string;
  data?: Record<string, unknown>;
}

export type Entry = Invoke | Complete | FaultEvent | Note;

export class History {
  readonly entries: Entry[] = [];
  private readonly out?: WriteStream;
  private nextOp = 1;
  private readonly start = performance.now();

  constructor(file?: string) {
    if (file) this.out = createWriteStream(file, { flags: 'w' });
  }

  now(): { t: number; at: number } {
    return { t: Math.round((performance.now() - this.start) * 10) / 10, at: Date.now() };
  }

  invoke(proc: string, f: OpName, node: string, args: Record<string, unknown>): Invoke {
    const e: Invoke = { type: 'invoke', op: this.nextOp++, ...this.now(), proc, f, node, args };
    this.add(e);
    return e;
  }

  complete(inv: Invoke, c: Pick<Complete, 'outcome' | 'status' | 'code' | 'error' | 'value'>): Complete {
    const e: Complete = { type: 'complete', op: inv.op, ...this.now(), proc: inv.proc, f: inv.f, ...c };
    this.add(e);
    return e;
  }

  fault(
    phase: 'start' | 'end',
    id: number,
    kind: string,
    target: string,
    params: Record<string, unknown>,
    error?: string,
  ): void {
    this.add({ type: 'fault', phase, id, ...this.now(), kind, target, params, ...(error ? { error } : {}) });
  }

  note(what: string, data?: Record<string, unknown>): void {
    this.add({ type: 'note', ...this.now(), what, ...(data ? { data } : {}) });
  }

  private add(e: Entry): void {
    this.entries.push(e);
    this.out?.write(`${JSON.stringify(e)}\n`);
  }

  close(): Promise<void> {
    return new Promise((resolve) => (this.out ? this.out.end(resolve) : resolve()));
  }

  static read(file: string): Entry[] {
    return readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => JSON.parse(l) as Entry);
  }
}

/** Each operation's invocation with its completion (none when the run ended first). */
export interface Op {
  invoke: Invoke;
  complete?: Complete;
}

export function operations(entries: Entry[]): Op[] {
  const byId = new Map<number, Op>();
  for (const e of entries) {
    if (e.type === 'invoke') byId.set(e.op, { invoke: e });
    else if (e.type === 'complete') {
      const op = byId.get(e.op);
      if (op) op.complete = e;
    }
  }
  return [...byId.values()];
}
