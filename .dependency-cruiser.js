// The import rule of src/ and bench/, checked by `npm run lint` (dependency-cruiser): no cycles, a
// module never imports one above it, and the service never imports its tools (test/, bench/,
// harness/). LAYERS lists src/'s folders from the top down, BENCH_LAYERS bench/'s files and folders;
// a file may import its own folder's files and anything of a lower layer, never one of its own layer
// or above. A type both need moves down to the lower one.
/** @type {string[][]} src/ folders, top layer first. The files at src/'s root (main, app.module, openapi) sit above all. */
const LAYERS = [
  ['operator'],
  ['admin', 'health'],
  ['orders', 'waiting-room', 'wait-page'],
  ['door', 'events', 'admissions'],
  ['proof-of-work'],
  ['inventory'],
  ['database'],
  ['infrastructure', 'logging'],
  ['metrics'],
  ['config'],
  ['common', 'types'],
];

/**
 * @type {string[][]} bench/ files (without .ts) and folders, top layer first: the commands, the
 * benchmarks they run, what runs and renders scenarios, the processes and peers, the shared shapes,
 * then what measures and the helpers at the bottom. A file not listed is held only to no-circular.
 */
const BENCH_LAYERS = [
  ['run', 'scaling-model', 'fixtures'],
  ['benchmark', 'waiting-room', 'door', 'events', 'pow', 'overload'],
  ['scenarios', 'report'],
  ['standalone', 'returns', 'redis-setups', 'peers'],
  ['scenario-result', 'service'],
  ['types'],
  ['metrics', 'costs', 'options', 'open-loop', 'cpu-cap'],
  ['http', 'load', 'cli', 'pick'],
];

/** One rule per entry of `layers`: nothing of its own layer or above, bar itself. */
function layerRules(root, layers, pathOf) {
  return layers.flatMap((layer, i) =>
    layer.map((name) => {
      const above = layers
        .slice(0, i + 1)
        .flat()
        .filter((n) => n !== name);
      return {
        name: `no-upward-from-${root}-${name}`,
        severity: 'error',
        comment: `${root}/${name} may import only lower layers (see the layers in .dependency-cruiser.js)`,
        from: { path: pathOf(name) },
        to: { path: pathOf(`(${above.join('|')})`) },
      };
    }),
  );
}

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'an import cycle: each module of it waits for another to load',
      from: { path: '^(src|bench|harness)/' },
      to: { circular: true },
    },
    {
      name: 'no-import-of-the-top',
      severity: 'error',
      comment: "src/'s root files (main, app.module, openapi) start the service; nothing below imports them",
      from: { path: '^src/[^/]+/' },
      to: { path: '^src/[^/]+\\.ts$' },
    },
    {
      name: 'no-tool-in-the-service',
      severity: 'error',
      comment: 'the service ships without its tests, benchmark and harness',
      from: { path: '^src/' },
      to: { path: '^(test|bench|harness)/' },
    },
    {
      name: 'no-nemesis-in-the-service',
      severity: 'error',
      comment: 'the nemesis is a tool beside the service; the service never imports it',
      from: { path: '^(src|harness)/' },
      to: { path: '^nemesis/' },
    },
    {
      name: 'nemesis-beside-the-tests',
      severity: 'error',
      comment: 'the nemesis builds on the service and the harness, never on the tests or the benchmark',
      from: { path: '^nemesis/' },
      to: { path: '^(test|bench)/' },
    },
    {
      name: 'harness-below-its-users',
      severity: 'error',
      comment: 'the harness serves the tests and the benchmark; it imports neither',
      from: { path: '^harness/' },
      to: { path: '^(test|bench)/' },
    },
    ...layerRules('src', LAYERS, (name) => `^src/${name}/`),
    ...layerRules('bench', BENCH_LAYERS, (name) => `^bench/${name}(\\.ts$|/)`),
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '[.-]spec\\.ts$' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
