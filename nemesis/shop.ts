// The shop's side of the event stream: a backend following GET /events as Server-Sent Events
// (resuming with Last-Event-ID after any break, from whichever process answers), and a webhook
// receiver that checks each delivery's signature, sometimes answers 503 (as a shop's backend now and
// then fails), and keeps every event of every delivery. The checker compares both with PostgreSQL.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import http from 'node:http';
import { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Node } from './client';
import { Rng } from './rng';

export interface StreamEvent {
  cursor: string;
  type: string;
  productId: number | null;
  orderId: number | null;
  at: string;
  data: Record<string, unknown>;
}

export class EventFollower {
  readonly events: StreamEvent[] = [];
  /** Times the stream broke and was resumed. */
  resumes = 0;
  /** Error frames the stream sent before it ended. */
  errors = 0;
  private last = '0-0';
  private running = false;
  private done?: Promise<void>;
  private req?: http.ClientRequest;

  constructor(
    private readonly nodes: () => Node[],
    private readonly shopToken: string,
    private readonly rng: Rng,
    private readonly file?: string,
  ) {}

  get lastCursor(): string {
    return this.last;
  }

  start(): void {
    this.running = true;
    this.done = (async () => {
      while (this.running) {
        const node = this.rng.pick(this.nodes());
        await this.follow(node).catch(() => undefined);
        if (!this.running) break;
        this.resumes++;
        await sleep(200);
      }
    })();
  }

  async stop(): Promise<void> {
    this.running = false;
    this.req?.destroy();
    await this.done;
  }

  /** One SSE connection, until it breaks or stays silent past the stream's heartbeat (15 s) and a margin. */
  private follow(node: Node): Promise<void> {
    return new Promise((resolve, reject) => {
      const req = http.get(
        `${node.url}/events`,
        {
          headers: {
            accept: 'text/event-stream',
            authorization: `Bearer ${this.shopToken}`,
            'last-event-id': this.last,
          },
          agent: false,
        },
        (res) => {
          if (res.statusCode !== 200) {
            res.resume();
            reject(new Error(`GET /events: ${res.statusCode}`));
            return;
          }
          let buffer = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            buffer += chunk;
            let end: number;
            while ((end = buffer.indexOf('\n\n')) >= 0) {
              this.message(buffer.slice(0, end));
              buffer = buffer.slice(end + 2);
            }
          });
          res.on('end', resolve);
          res.on('error', reject);
          res.on('close', resolve);
        },
      );
      this.req = req;
      req.setTimeout(25_000, () => req.destroy(new Error('silent')));
      req.on('error', reject);
    });
  }

  private message(block: string): void {
    let data = '';
    let id: string | undefined;
    for (const line of block.split('\n')) {
      if (line.startsWith('data:')) data += line.slice(5).trim();
      else if (line.startsWith('id:')) id = line.slice(3).trim();
    }
    // Only a frame with an id is an event; `event: error` says why the stream is about to end.
    if (!data || id === undefined) {
      if (data) this.errors++;
      return;
    }
    const e = JSON.parse(data) as StreamEvent;
    this.events.push(e);
    this.last = e.cursor;
    if (this.file) appendFileSync(this.file, `${data}\n`);
  }
}

export interface Delivery {
  at: number;
  status: number;
  signed: boolean;
  events: StreamEvent[];
}

export class WebhookReceiver {
  readonly deliveries: Delivery[] = [];
  private constructor(
    private readonly server: http.Server,
    readonly url: string,
    private readonly secret: string,
    private readonly rng: Rng,
    private readonly file?: string,
  ) {}

  static async start(host: string, secret: string, rng: Rng, file?: string): Promise<WebhookReceiver> {
    const server = http.createServer();
    await new Promise<void>((resolve) => server.listen(0, host, resolve));
    const { port } = server.address() as AddressInfo;
    const receiver = new WebhookReceiver(server, `http://${host}:${port}/webhook`, secret, rng, file);
    server.on('request', (req, res) => receiver.handle(req, res));
    return receiver;
  }

  /** Events acknowledged (answered 2xx), each delivery's in order. */
  acknowledged(): StreamEvent[] {
    return this.deliveries.filter((d) => d.status < 300).flatMap((d) => d.events);
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const signed = this.verified(raw, req.headers['flashsale-signature']);
      let events: StreamEvent[];
      try {
        events = (JSON.parse(raw.toString()) as { events: StreamEvent[] }).events ?? [];
      } catch {
        events = [];
      }
      // A shop's backend fails now and then: the batch must come again.
      const status = signed && !this.rng.chance(0.05) ? 200 : 503;
      const d: Delivery = { at: Date.now(), status, signed, events };
      this.deliveries.push(d);
      if (this.file) appendFileSync(this.file, `${JSON.stringify(d)}\n`);
      res.writeHead(status).end();
    });
  }

  private verified(raw: Buffer, header: string | string[] | undefined): boolean {
    const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(typeof header === 'string' ? header : '');
    if (!m) return false;
    const mac = createHmac('sha256', this.secret).update(`${m[1]}.`).update(raw).digest();
    return timingSafeEqual(mac, Buffer.from(m[2], 'hex'));
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.closeAllConnections();
      this.server.close(() => resolve());
    });
  }
}
