import { GroupedCalls } from './grouped-calls';

describe('GroupedCalls', () => {
  it('should send the joins that wait meanwhile as one call, in the order they came', async () => {
    const calls: number[][] = [];
    let release: () => void = () => undefined;
    const groups = new GroupedCalls<number, string>(async (_key, inputs) => {
      calls.push(inputs);
      if (calls.length === 1) await new Promise<void>((r) => (release = r));
      return inputs.map((n) => `#${n}`);
    });
    const first = groups.take(7, 1);
    await new Promise((r) => setImmediate(r));
    const rest = [groups.take(7, 2), groups.take(7, 3), groups.take(7, 4)];
    release();
    expect(await first).toBe('#1');
    expect(await Promise.all(rest)).toEqual(['#2', '#3', '#4']);
    expect(calls).toEqual([[1], [2, 3, 4]]);
  });

  it('should keep products apart and cap a group at its most', async () => {
    const calls: Array<[number, number[]]> = [];
    const groups = new GroupedCalls<number, number>(async (key, inputs) => {
      calls.push([key, inputs]);
      return inputs;
    }, 2);
    await Promise.all([groups.take(1, 1), groups.take(1, 2), groups.take(1, 3), groups.take(1, 4), groups.take(2, 9)]);
    expect(calls.filter(([key]) => key === 1)).toEqual([
      [1, [1, 2]],
      [1, [3, 4]],
    ]);
    expect(calls.filter(([key]) => key === 2)).toEqual([[2, [9]]]);
  });

  it('should send the joins taken in one turn of the event loop as one call, not the first alone', async () => {
    const calls: number[][] = [];
    const groups = new GroupedCalls<number, number>(async (_key, inputs) => {
      calls.push(inputs);
      return inputs;
    });
    const burst = [groups.take(3, 1), groups.take(3, 2)];
    await Promise.resolve();
    burst.push(groups.take(3, 3));
    expect(calls).toEqual([]);
    expect(await Promise.all(burst)).toEqual([1, 2, 3]);
    expect(calls).toEqual([[1, 2, 3]]);
    // A lone join later still goes, alone, at the end of its own turn.
    expect(await groups.take(3, 4)).toBe(4);
    expect(calls).toEqual([[1, 2, 3], [4]]);
  });

  it('should fail every join of a group whose call failed, and go on with the next group', async () => {
    let n = 0;
    const groups = new GroupedCalls<number, number>(async (_key, inputs) => {
      if (n++ === 0) throw new Error('down');
      return inputs;
    });
    const a = groups.take(1, 1);
    await new Promise((r) => setImmediate(r));
    const b = groups.take(1, 2);
    await expect(a).rejects.toThrow('down');
    await expect(b).resolves.toBe(2);
  });

  it('should have up to `calls` groups of one key out at once, the next leaving when one returns', async () => {
    const calls: number[][] = [];
    const releases: Array<() => void> = [];
    const groups = new GroupedCalls<number, number>(
      async (_key, inputs) => {
        calls.push(inputs);
        await new Promise<void>((r) => releases.push(r));
        return inputs;
      },
      2000,
      2,
    );
    const all = [groups.take(5, 1)];
    await new Promise((r) => setImmediate(r));
    all.push(groups.take(5, 2), groups.take(5, 3));
    await new Promise((r) => setImmediate(r));
    // Two out: [1] and [2, 3]; the next waits for one of them.
    all.push(groups.take(5, 4));
    await new Promise((r) => setImmediate(r));
    expect(calls).toEqual([[1], [2, 3]]);
    releases[1]();
    await all[2];
    await new Promise((r) => setImmediate(r));
    expect(calls).toEqual([[1], [2, 3], [4]]);
    releases[0]();
    releases[2]();
    expect(await Promise.all(all)).toEqual([1, 2, 3, 4]);
  });

  it('should refuse an answer that does not have one output per input', async () => {
    const groups = new GroupedCalls<number, number>(async () => []);
    await expect(groups.take(1, 1)).rejects.toThrow('answered 0 of 1');
  });
});
