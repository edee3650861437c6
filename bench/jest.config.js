// The benchmark's own tests, run by `npm test` here (or `npm test -w bench` from the top): its unit
// specs beside the code (the report's and the scaling model's arithmetic, against fixed figures)
// and its e2e specs in bench/test/ (a short real run, the peers held to the service's invariants,
// the waiting room's run), on the PostgreSQL and Redis the top's test/support/global-setup.ts starts.
// The transforms are the top project's (jest.config.js), so a spec loads here as it loads there.
const { resolve } = require('node:path');
const top = require('../jest.config.js');

const rootDir = resolve(__dirname, '..');
const [unit, e2e] = top.projects;

/** @type {import('jest').Config} */
module.exports = {
  ...top,
  projects: [
    { ...unit, rootDir, displayName: 'bench-unit', testMatch: ['<rootDir>/bench/**/*.spec.ts'] },
    { ...e2e, rootDir, displayName: 'bench-e2e', testMatch: ['<rootDir>/bench/test/**/*.e2e-spec.ts'] },
  ],
};
