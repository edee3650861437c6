// The benchmark's command line as runBenchmark receives it (parseArgs in run.ts).
import { parseArgs } from './run';

describe('npm run bench: its flags', () => {
  it('should take --requests as the steady scenarios length in requests, leaving --duration unset', () => {
    expect(parseArgs(['--requests', '300'], {})).toMatchObject({ requests: 300, duration: undefined });
    expect(parseArgs([], {}).requests).toBeUndefined();
  });

  it.each(['0', '1.5', 'many'])('should refuse --requests %s, naming the flag', (n) => {
    expect(() => parseArgs(['--requests', n], {})).toThrow(/--requests/);
  });
});
