// A budget `<rate>[,<burst>]` becomes `burst` calls per window of burst / rate seconds.
import { parseBudget } from './rate-limits.service';

describe('parseBudget', () => {
  it.each([
    ['5', { points: 5, durationS: 1 }],
    ['5,10', { points: 10, durationS: 2 }],
    ['1,60', { points: 60, durationS: 60 }],
    ['100,50', { points: 50, durationS: 1 }],
    ['3,10', { points: 10, durationS: 3 }],
  ])('should read %s as its calls per window', (spec, budget) => {
    expect(parseBudget(spec)).toEqual(budget);
  });

  it('should read 0 as no limit', () => {
    expect(parseBudget('0')).toBeNull();
  });
});
