// The start log's links: a browser can open each, whatever HOST the service listens on.
import { startLinks } from './start-links';

describe('startLinks', () => {
  it.each([
    ['0.0.0.0', 3000, 'http://localhost:3000'],
    ['::', 3004, 'http://localhost:3004'],
    ['127.0.0.1', 8080, 'http://127.0.0.1:8080'],
    ['::1', 3000, 'http://[::1]:3000'],
    ['shop.internal', 3000, 'http://shop.internal:3000'],
  ])('should point HOST %s, PORT %i at %s', (host, port, base) => {
    expect(startLinks({ host, port })).toBe(
      `operator page ${base}/admin, API docs ${base}/docs, metrics ${base}/metrics`,
    );
  });
});
