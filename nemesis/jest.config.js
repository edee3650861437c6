// The nemesis's own tests, run by `npm test` here (or `npm run nemesis:test` from the top): its unit
// specs beside the code (the checker on made-up runs, the schedule, the links), and its e2e specs
// in nemesis/test/ (a short run that must find nothing; a planted bug that must be found). The e2e
// specs start their own world, so there is no global setup. The transforms are the top project's.
const { resolve } = require('node:path');
const top = require('../jest.config.js');

const rootDir = resolve(__dirname, '..');
const [unit, e2e] = top.projects;
// The top's e2e project without its global setup (the test run's PostgreSQL and Redis) and its
// after-each-file checks: a nemesis run starts and stops a world of its own.
const e2eNoSetup = Object.fromEntries(
  Object.entries(e2e).filter(([k]) => !['globalSetup', 'globalTeardown', 'setupFilesAfterEnv'].includes(k)),
);

/** @type {import('jest').Config} */
module.exports = {
  ...top,
  projects: [
    { ...unit, rootDir, displayName: 'nemesis-unit', testMatch: ['<rootDir>/nemesis/**/*.spec.ts'] },
    { ...e2eNoSetup, rootDir, displayName: 'nemesis-e2e', testMatch: ['<rootDir>/nemesis/test/**/*.e2e-spec.ts'] },
  ],
};
