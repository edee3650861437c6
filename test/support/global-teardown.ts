// Stops what global-setup started, then fails the run if any service printed a secret it was given.
import { rmSync } from 'node:fs';
import { findLeaks } from './secret-leaks';

export default async function globalTeardown(): Promise<void> {
  const stops = (globalThis as { __flashsaleStops?: Array<() => Promise<void>> }).__flashsaleStops ?? [];
  for (const stop of stops.reverse()) await stop().catch(() => undefined);
  if (process.env.FLASHSALE_FAULT_TEMPLATES)
    rmSync(process.env.FLASHSALE_FAULT_TEMPLATES, { recursive: true, force: true });
  const dir = process.env.FLASHSALE_LOG_DIR;
  if (!dir) return;
  const { logs, secrets, leaks } = findLeaks(dir);
  if (leaks.length > 0)
    throw new Error(
      `secrets printed in service logs (kept in ${dir}):\n${leaks.map((l) => `  ${l.log}: ${l.secret}`).join('\n')}`,
    );
  process.stdout.write(`\nsecret-leak check: ${logs} service logs, ${secrets} secrets, none printed\n`);
  rmSync(dir, { recursive: true, force: true });
}
