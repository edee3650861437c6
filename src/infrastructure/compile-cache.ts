// Node's module compile cache: V8's compiled code of every module the service loads, kept on disk
// (in os.tmpdir()/node-compile-cache, or the folder NODE_COMPILE_CACHE names;
// NODE_DISABLE_COMPILE_CACHE=1 turns it off), so that a start after the first compiles less. A
// start is mostly loading modules (about 1,400), and the cache takes about 15 % off its CPU
// (docs/operations.md). Imported first by main.ts: only modules loaded after it benefit. Node
// never fails a start over it (a folder it cannot write is left alone). TypeScript's and ESLint's
// own entry points do the same.
import { enableCompileCache, flushCompileCache } from 'node:module';

enableCompileCache();

/** Writes what was compiled so far now, not only at a clean exit: a process killed later leaves it too. */
export function keepCompiledCode(): void {
  flushCompileCache();
}
