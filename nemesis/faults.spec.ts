// The fault schedule: a function of the seed alone (the same seed names the same faults at the same
// moments), every kind asked for drawn over a long enough run, never two faults on one target at
// once, and every fault over before the calm at the end.
import { schedule, Shape, WORLD_KINDS } from './faults';
import { Rng } from './rng';

const shape: Shape = {
  services: ['s0', 's1', 's2'],
  redis: ['r0', 'r1', 'r2'],
  links: ['pg', 'r0', 'r1', 'r2'],
  lockTtlMs: 1000,
};

describe('schedule', () => {
  it('should draw the same faults from the same seed, and others from another', () => {
    const a = schedule(new Rng(42).fork('faults'), WORLD_KINDS.quorum, shape, 600_000);
    const b = schedule(new Rng(42).fork('faults'), WORLD_KINDS.quorum, shape, 600_000);
    const c = schedule(new Rng(43).fork('faults'), WORLD_KINDS.quorum, shape, 600_000);
    expect(b).toEqual(a);
    expect(c).not.toEqual(a);
  });

  it('should play every kind of its world over ten minutes, and hold each target by one fault at a time', () => {
    const faults = schedule(new Rng(7), WORLD_KINDS.quorum, shape, 600_000);
    expect(new Set(faults.map((f) => f.kind))).toEqual(new Set(WORLD_KINDS.quorum));
    for (const f of faults)
      for (const g of faults)
        if (f.id < g.id && f.holds.some((h) => g.holds.includes(h))) expect(g.at).toBeGreaterThanOrEqual(f.at + f.ms);
  });

  it('should end every fault 2 s before the run does, and pause a process longer than the lock lease', () => {
    const faults = schedule(new Rng(3), WORLD_KINDS.quorum, shape, 60_000);
    expect(faults.length).toBeGreaterThan(5);
    for (const f of faults) expect(f.at + f.ms).toBeLessThanOrEqual(58_000);
    // A pause cut short by the calm is the only one shorter than one and a half leases.
    for (const f of faults.filter((x) => x.kind === 'pause' && x.at + x.ms < 58_000))
      expect(f.ms).toBeGreaterThanOrEqual(1500);
  });
});
