import { createServer } from 'node:net';
import { confinedPorts, ephemeralLow, FETCH_REFUSES, freePort, onFreePort } from './free-port';
import { EmbeddedServerError, PortTakenError } from './postgres-placement';

describe('a server on a port of our choosing', () => {
  it('chooses another free port when the one it chose was taken before the server listened', async () => {
    const tried: number[] = [];
    const port = await onFreePort(undefined, async (p) => {
      tried.push(p);
      if (tried.length < 3) throw new PortTakenError(`port ${p} is in use`);
      return p;
    });
    expect(tried).toHaveLength(3);
    expect(port).toBe(tried[2]);
    for (const p of tried) expect(p).toBeGreaterThan(0);
  });

  it('gives up after five ports, and never moves off a port the caller asked for', async () => {
    let tries = 0;
    await expect(
      onFreePort(undefined, async (p) => {
        tries++;
        throw new PortTakenError(`port ${p} is in use`);
      }),
    ).rejects.toBeInstanceOf(PortTakenError);
    expect(tries).toBe(5);

    const asked: number[] = [];
    await expect(
      onFreePort(5544, async (p) => {
        asked.push(p);
        throw new PortTakenError(`port ${p} is in use`);
      }),
    ).rejects.toThrow('port 5544 is in use');
    expect(asked).toEqual([5544]);
  });

  it('does not retry other failures', async () => {
    let tries = 0;
    await expect(
      onFreePort(undefined, async () => {
        tries++;
        throw new EmbeddedServerError('initdb failed');
      }),
    ).rejects.toThrow('initdb failed');
    expect(tries).toBe(1);
  });

  it('hands out a port that a server can listen on, below the ephemeral range that outgoing connections take ports from', async () => {
    const low = ephemeralLow();
    const ports = await Promise.all(Array.from({ length: 5 }, () => freePort()));
    for (const port of ports) {
      if (low > 11_000) expect(port).toBeLessThan(low);
      await new Promise<void>((resolve, reject) => {
        const srv = createServer();
        srv.once('error', reject);
        srv.listen(port, '127.0.0.1', () => srv.close(() => resolve()));
      });
    }
  });

  describe('confined by FLASHSALE_PORTS', () => {
    const held: Array<ReturnType<typeof createServer>> = [];
    const hold = (port: number) =>
      new Promise<void>((resolve, reject) => {
        const srv = createServer();
        srv.once('error', reject);
        srv.listen(port, '127.0.0.1', () => resolve());
        held.push(srv);
      });
    afterEach(async () => {
      delete process.env.FLASHSALE_PORTS;
      await Promise.all(held.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
    });

    it('hands out only a port of the range, and says so when every port of it is taken', async () => {
      const taken = await freePort();
      await hold(taken);
      // The next port free now, and the one below it taken (ours, or another process's): the range.
      // Below the ephemeral range only an explicit bind takes a port, so it stays free meanwhile.
      let other = taken + 1;
      const listens = (port: number) =>
        hold(port).then(
          () => true,
          () => false,
        );
      while (!(await listens(other))) other++;
      await new Promise((resolve) => held.pop()!.close(resolve));
      process.env.FLASHSALE_PORTS = `${other - 1}-${other}`;
      expect(await freePort()).toBe(other);

      await hold(other);
      await expect(freePort()).rejects.toThrow(`no free TCP port on 127.0.0.1 in FLASHSALE_PORTS`);
    });

    it("never hands out a port that fetch refuses (10080, a 'bad port'), free as it is", async () => {
      expect(FETCH_REFUSES.has(10080)).toBe(true);
      process.env.FLASHSALE_PORTS = '10080-10080';
      await expect(freePort()).rejects.toThrow('no free TCP port on 127.0.0.1 in FLASHSALE_PORTS 10080-10080');
      await expect(fetch('http://127.0.0.1:10080/')).rejects.toMatchObject({ cause: { message: 'bad port' } });
    });

    it('refuses a range it cannot read, naming the variable', () => {
      for (const bad of ['20000', '3000-2000', '0-10', '60000-70000', 'a-b'])
        expect(() => confinedPorts(bad)).toThrow(/^FLASHSALE_PORTS must be LOW-HIGH/);
      expect(confinedPorts(' 20000 - 20999 ')).toEqual({ low: 20000, high: 20999 });
      expect(confinedPorts('')).toBeNull();
    });
  });
});
