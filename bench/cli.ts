// The flag tables of `npm run bench` (run.ts) and `npm run scaling` (scaling-model.ts): every flag
// once, read by node:util parseArgs and printed by --help.
import { parseArgs } from 'node:util';

export interface Flag {
  type: 'string' | 'boolean';
  short?: string;
  /** The value's name in the help (string flags). */
  arg?: string;
  help: string;
}

export const value = (arg: string, help: string) => ({ type: 'string', arg, help }) as const;
export const toggle = (help: string) => ({ type: 'boolean', help }) as const;
export const HELP = { type: 'boolean', short: 'h', help: 'this text' } as const;

export function usageText(usage: string, flags: Record<string, Flag>, width: number): string {
  const rows = Object.entries(flags).map(([name, f]) => {
    const left = `${f.short ? `-${f.short}, ` : ''}--${name}${f.arg ? ` ${f.arg}` : ''}`;
    return `  ${left.padEnd(width)}${f.help}`;
  });
  return `Usage: ${usage}\n\n${rows.join('\n')}\n`;
}

/** The flags' values; parseArgs' own messages (unknown flag, missing value) are clear, only their kind changes. */
export function readFlags<T extends Record<string, Flag>>(argv: string[], flags: T, usage: new (m: string) => Error) {
  try {
    return parseArgs({ args: argv, options: flags, strict: true, allowPositionals: false }).values;
  } catch (err) {
    if ((err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) throw new usage((err as Error).message);
    throw err;
  }
}
