// The start log's last line: where a newcomer looks once the service is up.
import type { HttpConfig } from '../config/app-config';

/** The operator page, the API docs and the metrics at the service's address (every interface reads as localhost). */
export function startLinks(http: Pick<HttpConfig, 'port' | 'host'>): string {
  const host = ['0.0.0.0', '::'].includes(http.host)
    ? 'localhost'
    : http.host.includes(':')
      ? `[${http.host}]`
      : http.host;
  const base = `http://${host}:${http.port}`;
  return `operator page ${base}/admin, API docs ${base}/docs, metrics ${base}/metrics`;
}
