// The connection rules without a network: the server options handed to Fastify, the answer to what
// Node refuses before a request exists, and the per-address cap over fake sockets.
import { EventEmitter } from 'node:events';
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import { capConnectionsPerAddress, CHECK_INTERVAL_MS, clientErrorHandler, serverOptions } from './connections';

class FakeSocket extends EventEmitter {
  destroyed = false;
  writable = true;
  written = '';
  constructor(readonly remoteAddress: string) {
    super();
  }
  write(text: string) {
    this.written += text;
    return true;
  }
  destroy() {
    this.destroyed = true;
    this.emit('close');
  }
}

describe('serverOptions', () => {
  it("should hand the timeouts to Node's server, checked every second, with the keep-alive for proxies", () => {
    const o = serverOptions({ headersTimeoutMs: 5000, requestTimeoutMs: 10_000 });
    expect(o).toMatchObject({
      keepAliveTimeout: 72_000,
      requestTimeout: 10_000,
      http: { headersTimeout: 5000, connectionsCheckingInterval: CHECK_INTERVAL_MS },
    });
    expect(CHECK_INTERVAL_MS).toBeLessThanOrEqual(1000);
  });
});

describe('clientErrorHandler', () => {
  it.each([
    ['ERR_HTTP_REQUEST_TIMEOUT', 408, 'REQUEST_TIMEOUT', 1],
    ['HPE_HEADER_OVERFLOW', 431, 'HEADERS_TOO_LARGE', 0],
    ['HPE_INVALID_METHOD', 400, 'VALIDATION_FAILED', 0],
  ])('should answer %s with %i %s in the error shape and close', (code, status, errorCode, timeouts) => {
    const timedOut = jest.fn();
    const socket = new FakeSocket('10.0.0.1');
    clientErrorHandler(timedOut)(Object.assign(new Error('x'), { code }), socket as unknown as Socket);
    expect(socket.written).toMatch(new RegExp(`^HTTP/1.1 ${status} `));
    expect(JSON.parse(socket.written.split('\r\n\r\n')[1])).toMatchObject({ statusCode: status, code: errorCode });
    expect(socket.destroyed).toBe(true);
    expect(timedOut).toHaveBeenCalledTimes(timeouts);
  });

  it('should write nothing after an answer already sent on the connection, and still close it', () => {
    const socket = Object.assign(new FakeSocket('10.0.0.1'), { _httpMessage: { headersSent: true } });
    clientErrorHandler(() => undefined)(
      Object.assign(new Error('x'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }),
      socket as never,
    );
    expect(socket.written).toBe('');
    expect(socket.destroyed).toBe(true);
  });

  it('should write nothing to a connection the client reset', () => {
    const socket = new FakeSocket('10.0.0.1');
    clientErrorHandler(() => undefined)(Object.assign(new Error('x'), { code: 'ECONNRESET' }), socket as never);
    expect(socket.written).toBe('');
  });
});

describe('capConnectionsPerAddress', () => {
  const setUp = (max: number, trustProxy?: string[]) => {
    const server = new EventEmitter();
    const refused = jest.fn();
    capConnectionsPerAddress(server as unknown as Server, max, trustProxy, refused);
    const open = (address: string) => {
      const s = new FakeSocket(address);
      server.emit('connection', s);
      return s;
    };
    return { open, refused };
  };

  it('should close the connection past the cap of its address at once, and count it', () => {
    const { open, refused } = setUp(2);
    const [a, b, c] = [open('10.0.0.1'), open('10.0.0.1'), open('10.0.0.1')];
    expect([a.destroyed, b.destroyed, c.destroyed]).toEqual([false, false, true]);
    expect(open('10.0.0.2').destroyed).toBe(false);
    expect(refused).toHaveBeenCalledTimes(1);
    a.destroy();
    expect(open('10.0.0.1').destroyed).toBe(false);
  });

  it('should not count the trusted proxies, nor cap anything at 0', () => {
    const proxied = setUp(1, ['10.1.0.0/16']);
    expect([proxied.open('10.1.2.3'), proxied.open('10.1.2.3')].map((s) => s.destroyed)).toEqual([false, false]);
    const off = setUp(0);
    expect([off.open('10.0.0.1'), off.open('10.0.0.1')].map((s) => s.destroyed)).toEqual([false, false]);
  });
});
