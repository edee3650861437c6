// How the specs start built service processes (harness/launcher.ts, test/support/service.ts): a
// port taken by someone else is told apart from other start failures, and services started
// together never outlive a start that failed beside them.
import { createServer, Server } from 'node:net';
import { PortTakenError } from '../src/infrastructure/postgres-placement';
import { resetState } from './support/database';
import { startedTogether, startService } from './support/service';

describe('starting service processes for the specs', () => {
  beforeAll(() => resetState());

  it('should fail with PortTakenError, without trying another port, when the port asked for is taken', async () => {
    // Each connection is closed at once: a socket left unread would keep close() below waiting.
    const holder: Server = createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const port = (holder.address() as { port: number }).port;
    try {
      const start = startService({ PORT: String(port) });
      await expect(start).rejects.toBeInstanceOf(PortTakenError);
      await expect(start).rejects.toThrow(`port ${port} is in use`);
    } finally {
      await new Promise((resolve) => holder.close(resolve));
    }
  });

  it('should stop the services that started when another one started with them failed, and throw that failure', async () => {
    const started = startService();
    const failure = new Error('the other start failed');
    await expect(startedTogether([started, Promise.reject(failure)])).rejects.toBe(failure);
    const service = await started;
    expect({ exitCode: service.child.exitCode, signal: service.child.signalCode }).not.toEqual({
      exitCode: null,
      signal: null,
    });
  });
});
