// Two projects. `unit`: specs beside the code (src/**/*.spec.ts) against fakes; no global setup, no
// build, no PostgreSQL, no Redis, so it runs in seconds. `e2e`: test/**/*.e2e-spec.ts against the
// built service and the real PostgreSQL and Redis that test/support/global-setup.ts starts.
// `npm test` builds, then runs both; `npm run test:unit` / `npm run test:e2e` run one. The
// benchmark's specs are its workspace's (bench/jest.config.js, `npm run bench:test`), which reuses
// these projects' transforms.

// ts-jest type-strips each file on its own (tsconfig.json sets isolatedModules), so a spec costs a
// parse, not a type check; `npm run lint` does the type check.
const typescript = ['ts-jest', { tsconfig: 'tsconfig.json' }];

// NestJS 12 (and the packages built with it) ships ES modules only. Jest's module loader can
// require() an ES module on Node 24 only when Node runs with --experimental-vm-modules (checked on
// 24.21: without the flag every spec that loads @nestjs/common fails "Must use import to load ES
// Module"; with it they pass, behind an ExperimentalWarning). Rather than run the tests on an
// experimental Node API, jest has Babel turn those packages into CommonJS as they load. The built
// service needs nothing of the kind: Node's own require(esm) runs it.
// The in-process app of the e2e specs (test/support/in-process.ts) loads two more ES modules, each
// nested under a CommonJS package: content-disposition under @fastify/static (Swagger's UI) and
// cookie under light-my-request (Fastify's inject). The outer package is named too: a file is
// skipped when the first package of its path is not listed.
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
const esmToCommonJs = [
  'babel-jest',
  {
    babelrc: false,
    configFile: false,
    plugins: [
      require.resolve('./test/support/babel-esm-to-cjs.js'),
      '@babel/plugin-transform-modules-commonjs',
      'babel-plugin-transform-import-meta',
    ],
  },
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
      transform: { '^.+\\.ts$': typescript, '^.+\\.js$': esmToCommonJs },
      transformIgnorePatterns: [`/node_modules/(?!(${esmPackages.join('|')})/)`],
    },
    {
      ...common,
      displayName: 'e2e',
      testMatch: ['<rootDir>/test/**/*.e2e-spec.ts'],
      // Specs that drive a repository on the real PostgreSQL import Nest-decorated classes too.
      transform: { '^.+\\.ts$': typescript, '^.+\\.js$': esmToCommonJs },
      transformIgnorePatterns: [`/node_modules/(?!(${esmPackages.join('|')})/)`],
      globalSetup: '<rootDir>/test/support/global-setup.ts',
      globalTeardown: '<rootDir>/test/support/global-teardown.ts',
      setupFilesAfterEnv: ['<rootDir>/test/support/after-each-file.ts'],
    },
  ],
};
