// Finds the project's root folder (the one with package.json), from src/ under jest or dist/src/ when built.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';

export function projectRoot(from: string = __dirname): string {
  let dir = from;
  while (!existsSync(join(dir, 'package.json')) || !existsSync(join(dir, 'lua'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error(`no project root above ${from}`);
    dir = up;
  }
  return dir;
}
