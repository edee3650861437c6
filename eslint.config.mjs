// ESLint with typescript-eslint's type-checked rules; formatting is Prettier's job (eslint-config-prettier
// turns off every rule that would argue with it). `npm run lint` runs both.
import eslint from '@eslint/js';
import prettier from 'eslint-config-prettier';
import { defineConfig } from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default defineConfig(
  { ignores: ['dist/', 'node_modules/', 'coverage/', 'bench/results/', '.data/'] },
  eslint.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      globals: globals.node,
      // One program for every file: the top tsconfig.json includes src, test, bench, nemesis, harness
      // and migrations (it is also what `npm run typecheck` checks). The project service would open
      // each workspace's own tsconfig as a program of its own, type-checking the service's files once
      // per workspace: 64 s of CPU instead of 34 s on 2 cores.
      parserOptions: { project: './tsconfig.json', tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // The bugs that matter most in async lock code: a promise nobody awaits (its failure is lost,
      // its lock outlives the request) and a promise handed where a plain callback is expected.
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      // A leading underscore marks a parameter a signature needs but the body does not use.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_' }],
    },
  },
  {
    // Specs, e2e helpers, the harness, the benchmark and the nemesis read untyped data by design (JSON bodies
    // off the wire, pg rows, jest mock calls) and assert on its shape, so the any-tracking rules are off.
    files: ['test/**/*.ts', 'src/**/*.spec.ts', 'bench/**/*.ts', 'harness/**/*.ts', 'nemesis/**/*.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },
  {
    files: ['test/**/*.ts', 'src/**/*.spec.ts', 'bench/test/**/*.ts', 'nemesis/**/*.spec.ts', 'nemesis/test/**/*.ts'],
    rules: {
      // A fake of an async method is written `async` so that a throw in it rejects, as the real one does.
      '@typescript-eslint/require-await': 'off',
    },
  },
  {
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    extends: [tseslint.configs.disableTypeChecked],
  },
  {
    // Jest reads its configuration files as CommonJS, and bench/main.cjs loads the flag table with require().
    files: ['**/jest.config.js', '**/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    // The operator page runs in the browser, with uPlot loaded before it.
    files: ['src/operator/page/**/*.js'],
    languageOptions: { globals: { ...globals.browser, uPlot: 'readonly' }, sourceType: 'script' },
  },
  {
    // The buyer's waiting page: ES modules in the browser.
    files: ['src/wait-page/page/**/*.js'],
    languageOptions: { globals: globals.browser, sourceType: 'module' },
  },
  prettier,
);
