// The order path's Redis scripts, each declared once: its file is lua/<file>-<N>.lua, N its number
// of keys (written in the file name only), or lua/<file>.lua when the caller gives the count with
// each call; its reply is decoded here, once, into a tagged union. A script is one line in SCRIPTS
// (and its file); defineScripts loads every entry as the ioredis command of its name, and runScript
// calls it and decodes the reply. Lua's replies: 0 is true in Lua, so the scripts compare, and
// answer plain integers that the decoders name.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { projectRoot } from './project-root';

/** What opening an order came to (begin-order.lua): sold out, the user's lock held elsewhere, or open with the hints. */
export type Opening =
  { kind: 'soldOut' } | { kind: 'inProgress' } | { kind: 'open'; generation: number; empty: Set<number> };

interface Script<R> {
  /** The file's name in lua/ without the key count and `.lua`. */
  file: string;
  /** Its number of keys; 'given' when the caller passes it first with every call. */
  keys: number | 'given';
  decode: (reply: unknown) => R;
}

const script = <Reply, R>(file: string, keys: number | 'given', decode: (reply: Reply) => R): Script<R> => ({
  file,
  keys,
  decode: decode as (reply: unknown) => R,
});

export const SCRIPTS = {
  // { -1 } sold out, { 0 } user lock held, { 1, generation, empty segments... } open. Keys: 4 with
  // the user lock, 3 without it (a Redis Cluster, where the lock hashes to a slot of its own).
  beginOrder: script('begin-order', 'given', (r: number[]): Opening => {
    if (r[0] === -1) return { kind: 'soldOut' };
    if (r[0] === 1) return { kind: 'open', generation: r[1], empty: new Set(r.slice(2)) };
    return { kind: 'inProgress' };
  }),
  endOrder: script('end-order', 1, (r: number) => ({ kind: r === 1 ? ('released' as const) : ('notHeld' as const) })),
  markSoldOut: script('mark-sold-out', 2, (r: number) => ({
    kind: r === 1 ? ('flagged' as const) : ('unitsCameBack' as const),
  })),
  stockReturned: script('stock-returned', 3, (r: number) => ({ kind: 'returned' as const, generation: r })),
  markSegmentEmpty: script('mark-segment-empty', 1, (r: number) => ({ kind: 'marked' as const, emptyCount: r })),
  raiseFence: script('raise-fence', 1, (r: number) => ({ kind: 'raised' as const, counter: Number(r) })),
};

export type ScriptName = keyof typeof SCRIPTS;
export type ScriptReply<N extends ScriptName> = ReturnType<(typeof SCRIPTS)[N]['decode']>;

/** The file of a script in lua/. */
export function scriptFile(name: ScriptName): string {
  const s = SCRIPTS[name];
  return s.keys === 'given' ? `${s.file}.lua` : `${s.file}-${s.keys}.lua`;
}

/** What defineScripts needs of a client (a Redis or a Cluster of ioredis). */
interface ScriptHost {
  defineCommand(name: string, definition: { lua: string; numberOfKeys?: number }): void;
}

/** Loads every script as a command of the client (ioredis uses EVALSHA, falling back to EVAL). */
export function defineScripts(client: ScriptHost): void {
  const dir = join(projectRoot(), 'lua');
  for (const name of Object.keys(SCRIPTS) as ScriptName[]) {
    const { keys } = SCRIPTS[name];
    client.defineCommand(name, {
      lua: readFileSync(join(dir, scriptFile(name)), 'utf8'),
      ...(keys === 'given' ? {} : { numberOfKeys: keys }),
    });
  }
}

/** Runs a script defined by defineScripts with its keys and arguments, and decodes its reply. */
export async function runScript<N extends ScriptName>(
  client: object,
  name: N,
  keys: string[],
  args: Array<string | number>,
): Promise<ScriptReply<N>> {
  const s = SCRIPTS[name];
  if (s.keys !== 'given' && keys.length !== s.keys) throw new Error(`${name} takes ${s.keys} keys, not ${keys.length}`);
  const command = (client as Record<string, (...a: unknown[]) => Promise<unknown>>)[name];
  const reply = await command.call(client, ...(s.keys === 'given' ? [keys.length] : []), ...keys, ...args);
  return s.decode(reply) as ScriptReply<N>;
}
