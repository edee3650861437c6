// The nemesis: a schedule of faults drawn from the seed before the run starts (so a seed names the
// same faults at the same moments on any machine), then played against the world. Faults overlap
// (a new one may start while others last) but never two on one target at once. Each fault's start
// and end go into the history; after each end, the time until every service answers GET /health
// again is noted as its recovery.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Direction } from './links';
import { History } from './history';
import { Rng } from './rng';

/** Faults of a service process, of its links and of PostgreSQL: every world has them. */
const COMMON = ['kill', 'pause', 'partition-pg', 'partition-redis', 'slow-link', 'clock', 'pg-restart'] as const;
/** Faults of the Redis masters of the Redlock quorum. */
const QUORUM = ['redis-pause', 'redis-restart', 'redis-flush', 'redis-clock'] as const;
/** Faults of a Redis Cluster with replicas. */
const CLUSTER = ['cluster-failover', 'cluster-pause'] as const;

export const FAULT_KINDS = [...COMMON, ...QUORUM, ...CLUSTER] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** The kinds each world plays unless told otherwise. */
export const WORLD_KINDS: Record<'quorum' | 'cluster', readonly FaultKind[]> = {
  quorum: [...COMMON, ...QUORUM],
  cluster: [...COMMON, ...CLUSTER],
};

export interface Fault {
  id: number;
  kind: FaultKind;
  /** What it strikes: a service (s0), a server (r1, pg, c2), or a service's link(s) (s0->r1+r2). */
  target: string;
  /** When it starts, in ms after the faults begin, and how long it lasts. */
  at: number;
  ms: number;
  params: Record<string, unknown>;
  /** What it holds while it lasts (a process, a server, a process's clock, the cluster). */
  holds: string[];
}

/** What the schedule needs to know of the world. */
export interface Shape {
  services: string[];
  /** The lock masters (quorum world) or the Cluster's shards (cluster world). */
  redis: string[];
  /** The servers a service reaches through a link of its own, which a slow link can slow. */
  links: string[];
  lockTtlMs: number;
}

/** How likely each kind is, among those the run enables. */
const WEIGHTS: Record<FaultKind, number> = {
  kill: 10,
  pause: 10,
  'partition-pg': 10,
  'partition-redis': 12,
  'slow-link': 6,
  clock: 8,
  'redis-pause': 6,
  'redis-restart': 6,
  'redis-flush': 4,
  'redis-clock': 5,
  'pg-restart': 4,
  'cluster-failover': 8,
  'cluster-pause': 5,
};

const direction = (rng: Rng): Direction => rng.weighted<Direction>({ both: 2, in: 1, out: 1 });

/**
 * The faults of a run `lengthMs` long, from `rng` alone. Every fault ends at least `calmMs`
 * before the length is up. The targets a fault holds are free for no other fault meanwhile.
 */
export function schedule(
  rng: Rng,
  kinds: readonly FaultKind[],
  shape: Shape,
  lengthMs: number,
  calmMs = 2000,
): Fault[] {
  const faults: Fault[] = [];
  const busyUntil = new Map<string, number>();
  const free = (targets: string[], at: number) => targets.every((t) => (busyUntil.get(t) ?? 0) <= at);
  const weights = Object.fromEntries(kinds.map((k) => [k, WEIGHTS[k]])) as Partial<Record<FaultKind, number>>;
  const ttl = shape.lockTtlMs;
  for (let at = rng.int(1000, 3000); at < lengthMs - calmMs; at += rng.int(500, 3000)) {
    const kind = rng.weighted(weights);
    const drawn = draw(rng, kind, shape, ttl);
    if (!drawn) continue;
    const ms = Math.min(drawn.ms, lengthMs - calmMs - at);
    if (ms < 100 && drawn.ms > 0) continue;
    if (!free(drawn.holds, at)) continue;
    for (const t of drawn.holds) busyUntil.set(t, at + ms + 500);
    faults.push({
      id: faults.length + 1,
      kind,
      target: drawn.target,
      at,
      ms,
      params: drawn.params,
      holds: drawn.holds,
    });
  }
  return faults;
}

/** One fault of a kind: its target, the resources it holds, its length, its parameters. */
function draw(
  rng: Rng,
  kind: FaultKind,
  shape: Shape,
  ttl: number,
): { target: string; holds: string[]; ms: number; params: Record<string, unknown> } | null {
  const service = rng.pick(shape.services);
  const master = rng.pick(shape.redis);
  switch (kind) {
    case 'kill':
      return { target: service, holds: [service], ms: rng.int(500, 3000), params: {} };
    case 'pause':
      // Longer than the lock's lease: its locks lapse while it sleeps, and it wakes believing it holds them.
      return {
        target: service,
        holds: [service],
        ms: rng.int(Math.round(1.5 * ttl), 4 * ttl),
        params: { lockTtlMs: ttl },
      };
    case 'partition-pg':
      return {
        target: `${service}->pg`,
        holds: [service],
        ms: rng.int(1000, 6000),
        params: { direction: direction(rng) },
      };
    case 'partition-redis': {
      const masters = rng.sample(shape.redis, rng.chance(0.5) ? 1 : 2).sort();
      return {
        target: `${service}->${masters.join('+')}`,
        holds: [service],
        ms: rng.int(1000, 6000),
        params: { masters, direction: direction(rng) },
      };
    }
    case 'slow-link': {
      const server = rng.pick(shape.links);
      return {
        target: `${service}->${server}`,
        holds: [service],
        ms: rng.int(2000, 6000),
        params: { server, delayMs: rng.int(50, 500) },
      };
    }
    case 'clock': {
      const offsetS = (rng.chance(0.5) ? 1 : -1) * rng.int(1, 20);
      return { target: service, holds: [`${service}:clock`], ms: rng.int(2000, 8000), params: { offsetS } };
    }
    case 'redis-pause':
      return { target: master, holds: [master], ms: rng.int(1000, 4000), params: {} };
    case 'redis-restart':
      return { target: master, holds: [master], ms: rng.int(300, 2000), params: {} };
    case 'redis-flush':
      return { target: master, holds: [master], ms: 0, params: {} };
    case 'redis-clock':
      return {
        target: master,
        holds: [master],
        ms: 0,
        params: { jumpMs: (rng.chance(0.75) ? 1 : -1) * rng.int(ttl, 5 * ttl) },
      };
    case 'pg-restart':
      return { target: 'pg', holds: ['pg'], ms: rng.int(500, 2000), params: {} };
    case 'cluster-failover':
      return { target: master, holds: ['cluster'], ms: rng.int(1000, 2500), params: {} };
    case 'cluster-pause':
      return { target: master, holds: ['cluster'], ms: rng.int(1000, 3000), params: {} };
    default:
      return null;
  }
}

/** How a fault is done to the world and undone. */
export interface Effects {
  start(f: Fault): Promise<void>;
  /** Undoes it; may say what the fault did (kept with its end in the history). */
  end(f: Fault): Promise<Record<string, unknown> | void>;
  /** Resolves once every service answers again (for the recovery time). */
  healthy(deadline: number): Promise<boolean>;
}

export interface Played {
  fault: Fault;
  startedAt: number;
  endedAt?: number;
  recoveryMs?: number;
  error?: string;
  /** What the fault did, as its end said. */
  result?: Record<string, unknown>;
}

/** Plays the schedule from now; resolves when every fault has ended. */
export async function play(faults: Fault[], effects: Effects, history: History): Promise<Played[]> {
  const began = Date.now();
  const chains = new Map<string, Promise<unknown>>();
  const played: Played[] = [];
  const recoveries: Array<Promise<void>> = [];
  const one = async (f: Fault): Promise<void> => {
    await sleep(Math.max(0, began + f.at - Date.now()));
    const p: Played = { fault: f, startedAt: Date.now() };
    played.push(p);
    history.fault('start', f.id, f.kind, f.target, f.params);
    try {
      await effects.start(f);
      await sleep(Math.max(0, p.startedAt + f.ms - Date.now()));
      p.result = (await effects.end(f)) ?? undefined;
    } catch (err) {
      p.error = (err as Error).message;
    }
    p.endedAt = Date.now();
    history.fault('end', f.id, f.kind, f.target, { ...f.params, ...(p.result ?? {}) }, p.error);
    const endedAt = p.endedAt;
    recoveries.push(
      effects.healthy(endedAt + 60_000).then((ok) => {
        if (ok) p.recoveryMs = Date.now() - endedAt;
        history.note('recovered', { fault: f.id, ms: p.recoveryMs ?? null });
      }),
    );
  };
  const runs = faults.map((f) => {
    // Faults on one target follow each other even when one overran its plan (a slow restart).
    const before = Promise.all(f.holds.map((h) => chains.get(h) ?? Promise.resolve()));
    const next = before.then(() => one(f));
    for (const h of f.holds) chains.set(h, next);
    return next;
  });
  await Promise.all(runs);
  await Promise.all(recoveries);
  return played;
}
