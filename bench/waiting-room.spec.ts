import { createHmac } from 'node:crypto';
import { dueHeap, fairnessShare, lotteryShare, millionJoins, percentiles, renderCapacity } from './waiting-room';

describe("the waiting room benchmark's arithmetic", () => {
  it('takes the nearest-rank p50, p90 and p99, and none of an empty list', () => {
    expect(percentiles([5, 1, 4, 2, 3, 6, 7, 8, 9, 10])).toEqual({ p50: 5, p90: 9, p99: 10 });
    expect(percentiles(Array.from({ length: 200 }, (_, i) => 200 - i))).toEqual({ p50: 100, p90: 180, p99: 198 });
    expect(percentiles([])).toEqual({ p50: null, p90: null, p99: null });
  });

  it('counts a batch in queue order when it starts right after the one before and was made no earlier', () => {
    const b = (first: number, last: number, admittedAt: number) => ({ first, last, admittedAt });
    expect(fairnessShare([b(1, 10, 0), b(11, 12, 5), b(13, 20, 5)])).toBe(1);
    expect(fairnessShare([b(1, 10, 0), b(12, 12, 5)])).toBe(0.5);
    expect(fairnessShare([b(1, 10, 10), b(11, 12, 5)])).toBe(0.5);
    expect(fairnessShare([])).toBe(1);
  });

  it('recomputes the lottery from the seed: right positions score 1, a swapped pair less', () => {
    const seed = 'ab'.repeat(32);
    const ids = Array.from({ length: 20 }, (_, i) => `ticket${i}`.padEnd(24, '0'));
    const key = (id: string) => createHmac('sha256', Buffer.from(seed, 'hex')).update(id).digest('hex');
    const ordered = [...ids].sort((a, c) => (key(a) < key(c) ? -1 : 1));
    const right = ordered.map((id, i) => ({ id, position: i + 1 }));
    expect(lotteryShare(seed, right)).toBe(1);
    const swapped = right.map((t, i) => (i < 2 ? { ...t, position: 2 - i } : t));
    expect(lotteryShare(seed, swapped)).toBe(0.9);
    // A sample of the pre-queue (positions with gaps) in the right relative order scores 1 too.
    expect(
      lotteryShare(
        seed,
        right.filter((_, i) => i % 3 === 0).map((t) => ({ ...t, position: t.position * 7 })),
      ),
    ).toBe(1);
  });

  it("gives --only capacity's answer as the full report's three rows: rates and CPU per call, each beside GET /health/live's", () => {
    const call = (perS: number, cpuUs: number | null) => ({ perS, cpuUs, redisCommands: 0 });
    const md = renderCapacity({ health: call(8000, 100), poll: call(6000, 120), join: call(4000, 210) });
    expect(md.split('\n').slice(2)).toEqual([
      '| joins of new users at full speed, /s (/ GET /health/live) | 4000 (0.50) | |',
      '| polls of a waiting ticket at full speed, /s (/ GET /health/live) | 6000 (0.75) | |',
      '| service CPU per call at full speed, µs: GET /health/live / a poll / a join (join / health) | 100 / 120 / 210 (2.10) | |',
    ]);
  });

  it('hands out buyers earliest due first, whatever order they came in', () => {
    const heap = dueHeap<{ due: number }>();
    for (const due of [5, 1, 9, 3, 7, 2, 8]) heap.push({ due });
    const out: number[] = [];
    while (heap.size > 0) out.push((heap.pop() as { due: number }).due);
    expect(out).toEqual([1, 2, 3, 5, 7, 8, 9]);
    expect(heap.pop()).toBeUndefined();
  });

  it('scales the per-join costs to a million joins a second: service and PostgreSQL cores, WAL, the seals, calls by processes and round trips', () => {
    expect(millionJoins(40, 3, 100, 0.2, 30, { pgCpuUsPerJoin: 12, walBytesPerJoin: 300, sealUsPerJoin: 0.2 })).toEqual(
      {
        serviceCores: 40,
        pollsPerS: 200_000,
        pollCores: 6,
        redisCommandsPerS: 3_000_000,
        // Two calls of a product out per process and round trip.
        controlSlotCallsPerS: 1_000_000,
        pgCores: 12,
        walMBps: 300,
        sealShare: 0.2,
      },
    );
    expect(millionJoins(null, 3, 10, 1).serviceCores).toBeNull();
    expect(millionJoins(40, 3, 10, 1).controlSlotCallsPerS).toBe(20_000);
    // Never more calls than joins.
    expect(millionJoins(40, 3, 1000, 0.1).controlSlotCallsPerS).toBe(1_000_000);
  });
});
