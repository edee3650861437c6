// Two projects. `unit`: specs beside the code (src/**/*.spec.ts, harness/**/*.spec.ts, and
// bench/*.spec.ts for the benchmark's and the scaling model's arithmetic) against fakes; no global
// setup, no build, no PostgreSQL, no Redis, so it runs in seconds. `e2e`: test/**/*.e2e-spec.ts against the
// built service and the real PostgreSQL and Redis that test/support/global-setup.ts starts.
// `npm test` builds, then runs both; `npm run test:unit` / `npm run test:e2e` run one.

// ts-jest type-strips each file on its own (tsconfig.json sets isolatedModules), so a spec costs a
// parse, not a type check; `npm run lint` does the type check.
const typescript = ['ts-jest', { tsconfig: 'tsconfig.json' }];

// NestJS 12 (and the packages built with it) ships ES modules only. Jest can require() an ES module
// only on Node 24.9+ with --experimental-vm-modules; on the Node this project supports (20.19+) it
// cannot, so jest has Babel turn those packages into CommonJS as they load. The built service needs
// nothing of the kind: Node's own require(esm) runs it.
const esmPackages = ['@nestjs', 'file-type', '@standard-schema', 'jose'];

// A few of those modules make their own `const require = createRequire(import.meta.url)`
// (@nestjs/swagger's UI, terminus's @HealthCheck). Turned into CommonJS, their imports would call
// that local `require` before it is defined; renaming it first leaves the name to the imports.
const renameLocalRequire = () => ({
  visitor: {
    Program(path) {
      if (path.scope.hasOwnBinding('require')) path.scope.rename('require', '_esmRequire');
    },
  },
});

const esmToCommonJs = [
  'babel-jest',
  {
    babelrc: false,
    configFile: false,
    plugins: [renameLocalRequire, '@babel/plugin-transform-modules-commonjs', 'babel-plugin-transform-import-meta'],
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
      testMatch: ['<rootDir>/src/**/*.spec.ts', '<rootDir>/harness/**/*.spec.ts', '<rootDir>/bench/**/*.spec.ts'],
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
    },
  ],
};
