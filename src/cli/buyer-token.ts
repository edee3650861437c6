// `npm run token -- --user <id> [--ttl <seconds>]`: prints a buyer token for that user on stdout,
// signed with BUYER_JWT_SECRET as the service reads it (the environment, then .env: the npm script
// passes --env-file-if-exists=.env, as `npm start` does). Nothing else goes to stdout, so
// `BUYER=$(npm run -s token -- --user 42)` keeps just the token.
import { parseArgs } from 'node:util';
import { ConfigurationError, loadConfig } from '../config/app-config';
import { BuyerTokenError, signBuyerToken } from '../door/buyer-token';

const USAGE = 'usage: npm run token -- --user <userId> [--ttl <seconds, default 3600>]';

function main(): void {
  let values: { user?: string; ttl?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      options: {
        user: { type: 'string', short: 'u' },
        ttl: { type: 'string', default: '3600' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (err) {
    return fail(`${(err as Error).message}\n${USAGE}`, 2);
  }
  if (values.help) return void process.stdout.write(`${USAGE}\n`);
  if (values.user === undefined) return fail(`--user is required\n${USAGE}`, 2);
  const ttl = /^\d+$/.test(values.ttl ?? '') ? Number(values.ttl) : NaN;
  try {
    const { identity } = loadConfig();
    process.stdout.write(`${signBuyerToken(identity, values.user, ttl)}\n`);
  } catch (err) {
    if (err instanceof BuyerTokenError || err instanceof ConfigurationError) return fail(err.message, 1);
    throw err;
  }
}

function fail(message: string, code: number): void {
  process.stderr.write(`${message}\n`);
  process.exitCode = code;
}

main();
