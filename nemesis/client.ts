// The nemesis's HTTP client: every call is an operation of the history, its invocation written before
// the request leaves and its completion when the answer (or the lack of one) is known, classified
// as the API defines its answers (see Outcome in history.ts).
import http from 'node:http';
import { Complete, History, OpName, Outcome } from './history';

export interface Node {
  name: string;
  url: string;
}

export interface Answer {
  outcome: Outcome;
  status: number;
  code?: string;
  body?: any;
  headers: http.IncomingHttpHeaders;
  complete: Complete;
}

export interface CallOptions {
  auth?: string;
  timeoutMs?: number;
  /** The fields of the answer's body kept in the history. */
  keep?: (body: any) => Record<string, unknown> | undefined;
  /** Extra headers (Accept, ...). */
  headers?: Record<string, string>;
}

/** An answer's outcome by the API's rules: 503 OUTCOME_UNKNOWN and a 500 may have happened; any other 4xx or 503 did not. */
export function outcomeOf(status: number, code: string | undefined): Outcome {
  if (status >= 200 && status < 300) return 'ok';
  if (status === 503 && code === 'OUTCOME_UNKNOWN') return 'unknown';
  if (status >= 500 && status !== 503) return 'unknown';
  return 'refused';
}

export class Client {
  private readonly agents = new Map<string, http.Agent>();

  constructor(private readonly history: History) {}

  async call(
    proc: string,
    f: OpName,
    node: Node,
    method: string,
    path: string,
    body: unknown,
    args: Record<string, unknown>,
    opts: CallOptions = {},
  ): Promise<Answer> {
    const inv = this.history.invoke(proc, f, node.name, args);
    let reply: { status: number; headers: http.IncomingHttpHeaders; text: string };
    try {
      reply = await this.send(node.url, method, path, body, opts);
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      // Refused at connect: the request never left. Anything else: it may have been acted on.
      const outcome: Outcome = e.code === 'ECONNREFUSED' || e.code === 'EHOSTUNREACH' ? 'failed' : 'unknown';
      const complete = this.history.complete(inv, { outcome, status: 0, error: e.code ?? e.message });
      return { outcome, status: 0, headers: {}, complete };
    }
    let parsed: any;
    try {
      parsed = reply.text ? JSON.parse(reply.text) : undefined;
    } catch {
      parsed = undefined;
    }
    const code = typeof parsed?.code === 'string' ? (parsed.code as string) : undefined;
    const outcome = outcomeOf(reply.status, code);
    const value = outcome === 'ok' ? opts.keep?.(parsed) : pick(parsed, ['orderId', 'newest']);
    const complete = this.history.complete(inv, {
      outcome,
      status: reply.status,
      ...(code ? { code } : {}),
      ...(value && Object.keys(value).length > 0 ? { value } : {}),
    });
    return { outcome, status: reply.status, code, body: parsed, headers: reply.headers, complete };
  }

  agent(base: string): http.Agent {
    let a = this.agents.get(base);
    if (!a) {
      a = new http.Agent({ keepAlive: true, maxSockets: 64 });
      this.agents.set(base, a);
    }
    return a;
  }

  private send(
    base: string,
    method: string,
    path: string,
    body: unknown,
    opts: CallOptions,
  ): Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string }> {
    return new Promise((resolve, reject) => {
      const payload = body === undefined ? undefined : JSON.stringify(body);
      const headers: Record<string, string> = { ...(opts.headers ?? {}) };
      if (payload !== undefined) {
        headers['content-type'] = 'application/json';
        headers['content-length'] = String(Buffer.byteLength(payload));
      }
      if (opts.auth) headers.authorization = `Bearer ${opts.auth}`;
      const req = http.request(`${base}${path}`, { method, agent: this.agent(base), headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString() }),
        );
      });
      req.setTimeout(opts.timeoutMs ?? 10_000, () =>
        req.destroy(Object.assign(new Error('timed out'), { code: 'TIMEOUT' })),
      );
      req.on('error', reject);
      req.end(payload);
    });
  }

  close(): void {
    for (const a of this.agents.values()) a.destroy();
  }
}

export function pick(body: any, keys: string[]): Record<string, unknown> | undefined {
  if (!body || typeof body !== 'object') return undefined;
  const out: Record<string, unknown> = {};
  for (const k of keys) if (body[k] !== undefined) out[k] = body[k];
  return out;
}
