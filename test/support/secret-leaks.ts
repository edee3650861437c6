// The check that no service printed a secret it was given: every service the e2e run starts through
// the launcher writes its whole output to FLASHSALE_LOG_DIR, beside the values of its secret
// variables (harness/launcher.ts); at the end of the run (global-teardown.ts) every log is searched
// for every secret of the run. A refused secret, a logged configuration, an error that quotes a
// header: any of them shows here.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface Leak {
  log: string;
  /** The secret, shortened: the report must not print it whole either. */
  secret: string;
}

export function findLeaks(dir: string): { logs: number; secrets: number; leaks: Leak[] } {
  const files = readdirSync(dir);
  const secrets = new Set<string>();
  for (const f of files.filter((f) => f.endsWith('.secrets.json')))
    for (const s of JSON.parse(readFileSync(join(dir, f), 'utf8')) as string[]) secrets.add(s);
  const logs = files.filter((f) => f.endsWith('.log'));
  const leaks: Leak[] = [];
  for (const log of logs) {
    const text = readFileSync(join(dir, log), 'utf8');
    for (const secret of secrets) if (text.includes(secret)) leaks.push({ log, secret: `${secret.slice(0, 4)}...` });
  }
  return { logs: logs.length, secrets: secrets.size, leaks };
}
