// The import rule of src/, checked by `npm run lint` (dependency-cruiser): no cycles, a module never
// imports one above it, and the service never imports its tools (test/, bench/, harness/). LAYERS lists src/'s folders from the top down; a folder may import
// its own files and any folder of a lower layer, never one of its own layer or above. A type both
// need moves down to the lower one.
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

const upward = LAYERS.flatMap((layer, i) =>
  layer.map((folder) => {
    const above = LAYERS.slice(0, i + 1)
      .flat()
      .filter((f) => f !== folder);
    return {
      name: `no-upward-from-${folder}`,
      severity: 'error',
      comment: `src/${folder}/ may import only lower layers (see LAYERS in .dependency-cruiser.js)`,
      from: { path: `^src/${folder}/` },
      to: { path: `^src/(${above.join('|')})/` },
    };
  }),
);

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'an import cycle: each module of it waits for another to load',
      from: { path: '^src/' },
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
    ...upward,
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '\\.spec\\.ts$' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
