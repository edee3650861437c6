// Two projects. `unit`: specs beside the code (src/**/*.spec.ts) against fakes; no global setup, no
// build, no PostgreSQL, no Redis, so it runs in seconds. `e2e`: test/**/*.e2e-spec.ts against the
// built service and the real PostgreSQL and Redis that test/support/global-setup.ts starts.
// `npm test` builds, then runs both; `npm run test:unit` / `npm run test:e2e` run one. The
// benchmark's specs are its workspace's (bench/jest.config.js, `npm run bench:test`), which reuses
// these projects' transforms.

// One transformer for both kinds of file: SWC (@swc/jest), which compiles each file on its own and
// checks no type (`npm run lint` does the type check).
// - TypeScript, with the decorators and their type metadata that Nest's injection reads (as
//   tsconfig.json's experimentalDecorators and emitDecoratorMetadata).
// - ES modules: NestJS 12 (and the packages built with it) ships ES modules only, and jest's module
//   loader can require() one on Node 24 only when Node runs with --experimental-vm-modules. Rather
//   than run the tests on an experimental Node API, SWC turns those packages into CommonJS as they
//   load; it also turns their `import()` into a require(), `import.meta.url` into the file's URL, and
//   renames a module's own top-level `require` (@nestjs/swagger has one). The built service needs
//   nothing of the kind: Node's own require(esm) runs it.
// SWC instead of ts-jest and Babel, which did the same: a clean checkout's `npm test` compiles about
// 1,600 files into jest's cache, and the unit specs then took 34 s of CPU instead of 17 s (an
// in-process e2e spec 24 s instead of 12.5 s).
const swc = (syntax) => [
  '@swc/jest',
  {
    jsc: {
      parser: syntax === 'typescript' ? { syntax, decorators: true } : { syntax },
      transform: syntax === 'typescript' ? { legacyDecorator: true, decoratorMetadata: true } : undefined,
      target: 'es2022',
    },
    module: { type: 'commonjs' },
    sourceMaps: 'inline',
  },
];
const transform = { '^.+\\.ts$': swc('typescript'), '^.+\\.js$': swc('ecmascript') };

// Which packages in node_modules are compiled: the ES-module ones. The in-process app of the e2e
// specs (test/support/in-process.ts) loads two more ES modules, each nested under a CommonJS package:
// content-disposition under @fastify/static (Swagger's UI) and cookie under light-my-request
// (Fastify's inject). The outer package is named too: a file is skipped when the first package of
// its path is not listed.
const esmPackages = [
  '@nestjs',
  'file-type',
  '@standard-schema',
  'jose',
  '@fastify/static',
  'content-disposition',
  'light-my-request',
  'cookie',
];

/** @type {import('jest').Config} */
const common = {
  rootDir: '.',
  moduleFileExtensions: ['ts', 'js', 'json'],
  testEnvironment: 'node',
};

/** @type {import('jest').Config} */
module.exports = {
  verbose: true,
  // A global option in Jest (a project cannot set it); unit specs finish far inside it anyway.
  testTimeout: 120000,
  projects: [
    {
      ...common,
      displayName: 'unit',
      testMatch: ['<rootDir>/src/**/*.spec.ts'],
      transform,
      transformIgnorePatterns: [`/node_modules/(?!(${esmPackages.join('|')})/)`],
    },
    {
      ...common,
      displayName: 'e2e',
      testMatch: ['<rootDir>/test/**/*.e2e-spec.ts'],
      // Specs that drive a repository on the real PostgreSQL import Nest-decorated classes too.
      transform,
      transformIgnorePatterns: [`/node_modules/(?!(${esmPackages.join('|')})/)`],
      globalSetup: '<rootDir>/test/support/global-setup.ts',
      globalTeardown: '<rootDir>/test/support/global-teardown.ts',
      setupFilesAfterEnv: ['<rootDir>/test/support/after-each-file.ts'],
    },
  ],
};
