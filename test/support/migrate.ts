// Applies the migrations to a database with the built code (dist/), as the service does at start:
// the global setup's database and the fault specs' template use it.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

const root = join(__dirname, '..', '..');

export function migrateWithBuiltCode(databaseUrl: string): void {
  execFileSync(
    process.execPath,
    [
      '-e',
      `require('./dist/src/infrastructure/migrate').runMigrations(process.argv[1]).then(() => process.exit(0), (e) => { console.error(e); process.exit(1); })`,
      databaseUrl,
    ],
    { cwd: root, stdio: 'inherit' },
  );
}
