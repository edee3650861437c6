// Where the browser of the page specs is: CHROMIUM_PATH, or Debian's chromium package (which
// `.ci/run` installs when it is missing).
import { existsSync } from 'node:fs';

export function chromiumPath(): string {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'];
  const found = candidates.find((p): p is string => p !== undefined && p !== '' && existsSync(p));
  if (!found)
    throw new Error("no Chromium: install Debian's chromium package (apt-get install chromium) or set CHROMIUM_PATH");
  return found;
}
