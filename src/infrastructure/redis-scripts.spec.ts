// The script registry: every entry's file exists under the name its key count gives, each is
// defined with that count, a call passes keys then arguments, and the replies decode to their kinds.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { projectRoot } from './project-root';
import { defineScripts, runScript, ScriptName, SCRIPTS, scriptFile } from './redis-scripts';

const names = Object.keys(SCRIPTS) as ScriptName[];

describe('the Redis script registry', () => {
  it.each(names)(
    'should find %s in lua/ under the name its key count gives, with that many KEYS in its header',
    (name) => {
      const file = join(projectRoot(), 'lua', scriptFile(name));
      expect(existsSync(file)).toBe(true);
      const { keys } = SCRIPTS[name];
      if (keys === 'given') expect(scriptFile(name)).toMatch(/^[a-z-]+[a-z]\.lua$/);
      else {
        expect(scriptFile(name)).toBe(`${SCRIPTS[name].file}-${keys}.lua`);
        const header = readFileSync(file, 'utf8').match(/^-- KEYS\[(\d+)\]/gm) ?? [];
        expect(header).toHaveLength(keys);
      }
    },
  );

  it('should define every script as a command of its name, with its key count unless the caller gives it', () => {
    const defined = new Map<string, { lua: string; numberOfKeys?: number }>();
    defineScripts({ defineCommand: (name, definition) => defined.set(name, definition) });
    expect([...defined.keys()].sort()).toEqual([...names].sort());
    expect(defined.get('beginOrder')).not.toHaveProperty('numberOfKeys');
    expect(defined.get('endOrder')?.numberOfKeys).toBe(1);
    expect(defined.get('markSoldOut')?.numberOfKeys).toBe(2);
    expect(defined.get('stockReturned')?.numberOfKeys).toBe(3);
    expect(defined.get('markSegmentEmpty')?.numberOfKeys).toBe(1);
  });

  it('should pass the key count first only where the caller gives it, then keys, then arguments', async () => {
    const client = {
      beginOrder: jest.fn(async () => [1, 7, 2, 5]),
      endOrder: jest.fn(async () => 0),
    };
    await expect(runScript(client, 'beginOrder', ['a', 'b', 'c'], ['t', 1, 2])).resolves.toEqual({
      kind: 'open',
      generation: 7,
      empty: new Set([2, 5]),
    });
    expect(client.beginOrder).toHaveBeenCalledWith(3, 'a', 'b', 'c', 't', 1, 2);
    await expect(runScript(client, 'endOrder', ['lock:order:u1'], ['t'])).resolves.toEqual({ kind: 'notHeld' });
    expect(client.endOrder).toHaveBeenCalledWith('lock:order:u1', 't');
  });

  it('should refuse a call with another number of keys than the script declares', async () => {
    const client = { markSoldOut: jest.fn(async () => 1) };
    await expect(runScript(client, 'markSoldOut', ['only-one'], [1, 2])).rejects.toThrow(
      'markSoldOut takes 2 keys, not 1',
    );
    expect(client.markSoldOut).not.toHaveBeenCalled();
  });

  it('should decode each reply into its kind', () => {
    expect(SCRIPTS.beginOrder.decode([-1])).toEqual({ kind: 'soldOut' });
    expect(SCRIPTS.beginOrder.decode([0])).toEqual({ kind: 'inProgress' });
    expect(SCRIPTS.beginOrder.decode([1, 3])).toEqual({ kind: 'open', generation: 3, empty: new Set() });
    expect(SCRIPTS.endOrder.decode(1)).toEqual({ kind: 'released' });
    expect(SCRIPTS.markSoldOut.decode(1)).toEqual({ kind: 'flagged' });
    expect(SCRIPTS.markSoldOut.decode(0)).toEqual({ kind: 'unitsCameBack' });
    expect(SCRIPTS.stockReturned.decode(42)).toEqual({ kind: 'returned', generation: 42 });
    expect(SCRIPTS.markSegmentEmpty.decode(4)).toEqual({ kind: 'marked', emptyCount: 4 });
  });
});
