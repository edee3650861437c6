// The links between a service process and what it depends on (PostgreSQL, each Redis), one TCP
// proxy per link in the nemesis's own process: the service is given the proxy's address instead of
// the server's. A link can be slowed (a delay on every chunk, each way: the kernel's sch_netem is
// not available everywhere) and, where network namespaces are not allowed, cut one way or both
// (its bytes held back until it heals, as the kernel holds a dropped segment's retransmissions).
// With namespaces the cuts are the packet filter's (network.ts) and these proxies only slow.
import { AddressInfo, connect, createServer, Server, Socket } from 'node:net';

/** Which way a cut drops: `out` the service's bytes to the server, `in` the server's to the service. */
export type Direction = 'both' | 'in' | 'out';

interface Pipe {
  service: Socket;
  server: Socket;
}

/** One way of one connection: its bytes, delayed or held as the link says, in order. */
class Flow {
  private readonly queue: Array<{ chunk: Buffer; due: number }> = [];
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly link: Link,
    private readonly way: 'in' | 'out',
    private readonly to: Socket,
  ) {}

  push(chunk: Buffer): void {
    this.queue.push({ chunk, due: Date.now() + this.link.delayMs });
    this.drain();
  }

  drain(): void {
    if (this.timer) return;
    while (this.queue.length > 0) {
      if (this.link.holds(this.way)) return;
      const wait = this.queue[0].due - Date.now();
      if (wait > 0) {
        this.timer = setTimeout(() => {
          this.timer = undefined;
          this.drain();
        }, wait);
        return;
      }
      const { chunk } = this.queue.shift() as { chunk: Buffer };
      if (!this.to.destroyed) this.to.write(chunk);
    }
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.queue.length = 0;
  }
}

export class Link {
  delayMs = 0;
  private cut: Direction | null = null;
  private readonly pipes = new Set<Pipe>();
  private readonly flows = new Set<Flow>();

  private constructor(
    readonly name: string,
    private readonly server: Server,
    readonly host: string,
    readonly port: number,
    private readonly upstream: () => { host: string; port: number },
  ) {}

  /** Listens on `host` (a free port) and forwards to wherever `upstream` says at each new connection. */
  static async open(name: string, host: string, upstream: () => { host: string; port: number }): Promise<Link> {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, host, resolve);
    });
    const link = new Link(name, server, host, (server.address() as AddressInfo).port, upstream);
    server.on('connection', (socket) => link.accept(socket));
    return link;
  }

  holds(way: 'in' | 'out'): boolean {
    return this.cut === 'both' || this.cut === way;
  }

  /** Holds back the bytes of one way or both (the proxy's own cut, without namespaces). */
  hold(direction: Direction): void {
    this.cut = direction;
  }

  release(): void {
    this.cut = null;
    for (const f of this.flows) f.drain();
  }

  slow(ms: number): void {
    this.delayMs = ms;
  }

  /** Ends every connection of the link, as a server restarting does (its clients reconnect through the link). */
  reset(): void {
    for (const p of this.pipes) {
      p.service.destroy();
      p.server.destroy();
    }
  }

  async close(): Promise<void> {
    this.reset();
    await new Promise((resolve) => this.server.close(resolve));
  }

  private accept(service: Socket): void {
    const { host, port } = this.upstream();
    const server = connect(port, host);
    service.setNoDelay(true);
    server.setNoDelay(true);
    const pipe = { service, server };
    this.pipes.add(pipe);
    const out = new Flow(this, 'out', server);
    const back = new Flow(this, 'in', service);
    this.flows.add(out).add(back);
    service.on('data', (c: Buffer) => out.push(c));
    server.on('data', (c: Buffer) => back.push(c));
    const close = () => {
      out.stop();
      back.stop();
      this.flows.delete(out);
      this.flows.delete(back);
      this.pipes.delete(pipe);
      service.destroy();
      server.destroy();
    };
    service.on('close', close).on('error', close);
    server.on('close', close).on('error', close);
  }
}
