// The start log's last line: where a newcomer looks once the service is up.
import type { HttpConfig } from '../config/app-config';

/** The service's address as a person on this machine types it (every interface reads as localhost). */
export function serviceUrl(http: Pick<HttpConfig, 'port' | 'host'>): string {
  const host = ['0.0.0.0', '::'].includes(http.host)
    ? 'localhost'
    : http.host.includes(':')
      ? `[${http.host}]`
      : http.host;
  return `http://${host}:${http.port}`;
}

/** The operator page, the API docs and the metrics at the service's address. */
export function startLinks(http: Pick<HttpConfig, 'port' | 'host'>): string {
  const base = serviceUrl(http);
  return `operator page ${base}/admin, API docs ${base}/docs, metrics ${base}/metrics`;
}
