/**
 * `retrysafe migrate --store postgres://…[?schema=name] [--schema name]`: creates the schema and applies the numbered
 * PostgreSQL migrations (see `stores/postgres/migrate.ts`). Safe to run at every deploy, twice, or from
 * several hosts at once (advisory lock + ledger table).
 *
 * Exit codes: 0 migrated or already up to date; 1 the database refused (message on stderr); 2 usage error
 * (a `--store` that is not a PostgreSQL URL, a bad `--schema`, or a `--schema` that differs from the
 * URL's `?schema=`).
 *
 * @module
 */
import { InvalidArgumentError, type Command } from 'commander';
import { migrate } from '../stores/postgres/migrate.js';
import { DEFAULT_SCHEMA } from '../stores/postgres/schema.js';
import type { StoreTarget } from './store-url.js';
import { schemaFlag, storeFlag } from './store-flag.js';

interface MigrateFlags {
  readonly store: StoreTarget;
  readonly schema: string;
}

/** Adds the `migrate` command to `program`. */
export function register(program: Command): void {
  program
    .command('migrate')
    .description('Create the idempotency schema on PostgreSQL and apply any pending migrations (idempotent).')
    .requiredOption('--store <url>', 'PostgreSQL URL, e.g. postgres://user@127.0.0.1:5432/app', postgresUrl)
    .option('--schema <name>', 'schema holding the records table (letters, digits, _)', schemaFlag, DEFAULT_SCHEMA)
    .addHelpText('after', '\nExit codes: 0 migrated (or already up to date), 1 the database refused, 2 usage error.')
    .action(async (flags: MigrateFlags, command: Command) => {
      const named = flags.store.schema;
      if (named !== undefined && command.getOptionValueSource('schema') === 'cli' && named !== flags.schema) {
        command.error(`retrysafe: --schema ${flags.schema} differs from the --store URL's ?schema=${named}; give one of them`, { exitCode: 2 });
      }
      const result = await migrate({ connectionString: flags.store.driverUrl, schema: named ?? flags.schema });
      const what = result.applied.length === 0 ? 'already up to date' : `applied ${result.applied.join(', ')}`;
      process.stdout.write(`retrysafe: schema "${result.schema}" at version ${result.version} (${what})\n`);
    });
}

/**
 * Parses `--store` through the shared `--store` table and keeps it only when it names PostgreSQL.
 *
 * @throws InvalidArgumentError (exit 2) for a bad `--store` or one naming another store
 */
function postgresUrl(text: string): StoreTarget {
  const target = storeFlag(text);
  if (target.scheme !== 'postgres' && target.scheme !== 'postgresql') {
    throw new InvalidArgumentError(`--store must be a postgres:// or postgresql:// URL; "migrate" only applies to PostgreSQL, got ${JSON.stringify(text)}.`);
  }
  return target;
}
