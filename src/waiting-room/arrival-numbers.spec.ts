import { ArrivalNumbers, ControlMissing } from './arrival-numbers';
import { QueueControl } from './queue.store';

const control = (arrivals: number): QueueControl => ({ epoch: 1, base: 0, pre: 0, drawn: true, shards: 4, arrivals });

describe('ArrivalNumbers', () => {
  it('serves the joins that came while a call was in flight with one call, numbered in the order they came', async () => {
    let counter = 0;
    const calls: number[] = [];
    const numbers = new ArrivalNumbers(async (_p, n) => {
      calls.push(n);
      await new Promise((r) => setTimeout(r, 5));
      counter += n;
      return control(counter);
    });
    const first = numbers.take(1);
    const rest = Array.from({ length: 5 }, () => numbers.take(1));
    const all = await Promise.all([first, ...rest]);
    expect(calls).toEqual([1, 5]);
    expect(all.map((t) => t.arrival)).toEqual([1, 2, 3, 4, 5, 6]);
    // A join that began after another was answered gets a larger number.
    expect((await numbers.take(1)).arrival).toBe(7);
  });

  it('fails the whole group when the control slot is missing or Redis fails, and serves the next group', async () => {
    let answer: 'missing' | 'error' | 'ok' = 'missing';
    const numbers = new ArrivalNumbers(async () => {
      if (answer === 'missing') return null;
      if (answer === 'error') throw new Error('down');
      return control(1);
    });
    await expect(numbers.take(3)).rejects.toBeInstanceOf(ControlMissing);
    answer = 'error';
    await expect(numbers.take(3)).rejects.toThrow('down');
    answer = 'ok';
    await expect(numbers.take(3)).resolves.toEqual({ control: control(1), arrival: 1 });
  });
});
