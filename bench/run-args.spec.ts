import { parseArgs } from './run';

describe('benchmark command line', () => {
  it('should pass --node-flags to every service start as separate flags', () => {
    expect(parseArgs(['--node-flags= --max-semi-space-size=16  --trace-gc '], {}).nodeFlags).toEqual([
      '--max-semi-space-size=16',
      '--trace-gc',
    ]);
  });

  it('should leave the service flags unset without --node-flags', () => {
    expect(parseArgs([], {}).nodeFlags).toBeUndefined();
  });

  it.each(['', 'main.js', '--trace-gc extra.js'])(
    'should refuse --node-flags %j, which would not be flags',
    (value) => {
      expect(() => parseArgs([`--node-flags=${value}`], {})).toThrow(/--node-flags: expected flags/);
    },
  );
});
