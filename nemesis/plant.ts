// Planted bugs: a copy of the built service with one rule taken out, in a temporary folder, for
// the services of a run to start instead of the project's own build (every run starts from a copy). The checker must find the
// bug; a run that plants one and finds nothing is a checker that cannot fail. The service's code
// has no switch for this: the copy is patched, and a patch that no longer applies (the code moved)
// stops the run rather than plant nothing.
import { cpSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

interface Patch {
  /** A built file, from the project's root. */
  file: string;
  from: string;
  to: string;
}

export const PLANTS: Record<string, { what: string; patches: Patch[] }> = {
  oversell: {
    what: "the sale's conditional write removed (no `stock >= q` on the one-order deduction) and the schema's CHECK (stock >= 0) with it; empty segments are no longer remembered, so orders keep landing on them whatever the faults' timing",
    patches: [
      {
        file: 'dist/src/orders/repositories/sale-writes.repository.js',
        from: 'WHERE product_id = $1 AND idx = $2 AND stock >= $3::int\n',
        to: 'WHERE product_id = $1 AND idx = $2\n',
      },
      {
        file: 'dist/migrations/1763700000000-InitialSchema.js',
        from: 'stock       bigint  NOT NULL CHECK (stock >= 0),',
        to: 'stock       bigint  NOT NULL,',
      },
      {
        // Without this, the hint that a segment is empty hides the bug until a Redis flush takes
        // the hint away while units remain elsewhere: a run on a loaded machine could miss that window.
        file: 'dist/src/orders/sale/segment-locking.service.js',
        from: 'rememberEmpty(product, idx) {\n        this.hints',
        to: 'rememberEmpty(product, idx) {\n        return;\n        this.hints',
      },
    ],
  },
  'double-return': {
    what: 'a cancel no longer checks that the order is still reserved, so a second cancel returns its units again',
    patches: [
      {
        file: 'dist/src/orders/repositories/order-lifecycle.repository.js',
        from: "if (r.status === 'cancelled')\n                return (0, order_sql_1.toOrderRow)(r);",
        to: "if (r.status === 'cancelled')\n                return null;",
      },
    ],
  },
};

/**
 * A copy of the built service in a temporary folder, with a planted bug's patches when `name` is
 * given; its root, to start dist/src/main.js from. Every run starts its services from such a copy,
 * so that a build made while a run lasts does not reach the processes it restarts.
 */
export function builtCopy(projectRoot: string, name?: string): string {
  const bug = name === undefined ? { patches: [] } : PLANTS[name];
  if (!bug) throw new Error(`no planted bug ${name}: ${Object.keys(PLANTS).join(', ')}`);
  const root = mkdtempSync(join(tmpdir(), `flashsale-nemesis-${name ?? 'build'}-`));
  cpSync(join(projectRoot, 'dist', 'src'), join(root, 'dist', 'src'), { recursive: true });
  cpSync(join(projectRoot, 'dist', 'migrations'), join(root, 'dist', 'migrations'), { recursive: true });
  cpSync(join(projectRoot, 'package.json'), join(root, 'package.json'));
  symlinkSync(join(projectRoot, 'lua'), join(root, 'lua'));
  symlinkSync(join(projectRoot, 'node_modules'), join(root, 'node_modules'));
  for (const p of bug.patches) {
    const file = join(root, p.file);
    const text = readFileSync(file, 'utf8');
    const count = text.split(p.from).length - 1;
    if (count !== 1)
      throw new Error(
        `planting ${String(name)}: ${p.file} holds the patched text ${count} times, not once (the code moved: update nemesis/plant.ts)`,
      );
    writeFileSync(file, text.replace(p.from, p.to));
  }
  return root;
}
