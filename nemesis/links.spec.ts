// A link's proxy on real sockets: bytes pass both ways; a cut one way holds that way's bytes (the
// other way still flows) and delivers them in order once healed; a slow link delays each chunk.
import { once } from 'node:events';
import { AddressInfo, connect, createServer, Server, Socket } from 'node:net';
import { Link } from './links';

describe('Link', () => {
  let echo: Server;
  let link: Link;
  let client: Socket;
  const got: Buffer[] = [];
  const received = () => Buffer.concat(got).toString();
  const until = async (check: () => boolean, ms = 3000) => {
    const end = Date.now() + ms;
    while (!check()) {
      if (Date.now() > end) throw new Error(`not seen: ${received()}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };

  beforeAll(async () => {
    // The server answers every chunk with the chunk in upper case.
    echo = createServer((s) => s.on('data', (c: Buffer) => s.write(c.toString().toUpperCase())));
    echo.listen(0, '127.0.0.1');
    await once(echo, 'listening');
    link = await Link.open('s0->r0', '127.0.0.1', () => ({
      host: '127.0.0.1',
      port: (echo.address() as AddressInfo).port,
    }));
    client = connect(link.port, '127.0.0.1');
    client.on('data', (c: Buffer) => got.push(c));
    await once(client, 'connect');
  });
  afterAll(async () => {
    client.destroy();
    await link.close();
    echo.close();
  });
  beforeEach(() => {
    got.length = 0;
  });

  it('should pass bytes both ways', async () => {
    client.write('ping');
    await until(() => received() === 'PING');
  });

  it('should hold what the service sends while cut out, and deliver it in order once healed', async () => {
    link.hold('out');
    client.write('a');
    client.write('b');
    await new Promise((r) => setTimeout(r, 200));
    expect(received()).toBe('');
    link.release();
    await until(() => received() === 'AB');
  });

  it('should hold the answers while cut in, the requests still reaching the server', async () => {
    link.hold('in');
    client.write('c');
    await new Promise((r) => setTimeout(r, 200));
    expect(received()).toBe('');
    link.release();
    await until(() => received() === 'C');
  });

  it('should delay each chunk each way on a slow link', async () => {
    link.slow(150);
    const sent = Date.now();
    client.write('d');
    await until(() => received() === 'D');
    link.slow(0);
    expect(Date.now() - sent).toBeGreaterThanOrEqual(290);
  });
});
