// The benchmark's own HTTP client beside autocannon (the waiting room's pollers and orders, the
// shop's pay and cancel calls): one request on the caller's keep-alive agent, a JSON body, the
// answer read whole.
import http from 'node:http';

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  ms: number;
}

/** Rejects on a connection error or after `timeoutMs` without a byte. */
export function request(
  agent: http.Agent,
  base: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
  timeoutMs = 30_000,
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const json =
      payload === undefined
        ? {}
        : { 'content-type': 'application/json', 'content-length': `${Buffer.byteLength(payload)}` };
    const req = http.request(`${base}${path}`, { method, agent, headers: { ...json, ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const ms = Number(process.hrtime.bigint() - started) / 1e6;
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString(), ms });
      });
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`${method} ${path} timed out`)));
    req.on('error', reject);
    req.end(payload);
  });
}
