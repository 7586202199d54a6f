/**
 * `retrysafe migrate --store postgres://…[?schema=name] [--schema name]`: creates the schema and applies the numbered
 * PostgreSQL migrations of every module (see `src/migrate.ts`). Safe to run at every deploy, twice, or from
 * several hosts at once (advisory lock + ledger table).
 *
 * Exit codes: 0 migrated or already up to date; 2 usage error (a `--store` that is not a PostgreSQL URL,
 * a bad `--schema`, or a `--schema` that differs from the URL's `?schema=`), or the database cannot be
 * reached or refuses (one line naming the URL, password redacted), or `pg` is not installed.
 *
 * @module
 */
import type { Command } from 'commander';
import { DEFAULT_SCHEMA } from '../stores/postgres/schema.js';
import { loadPeer } from './peer.js';
import { postgresStoreFlag, schemaFlag, schemaOf } from './store-flag.js';
import { unreachableStore, type StoreTarget } from '../store-url.js';

interface MigrateFlags {
  readonly store: StoreTarget;
}

/** Adds the `migrate` command to `program`. */
export function register(program: Command): void {
  program
    .command('migrate')
    .description('Create the idempotency schema on PostgreSQL and apply any pending migrations (idempotent).')
    .requiredOption('--store <url>', 'PostgreSQL URL, e.g. postgres://user@127.0.0.1:5432/app', postgresStoreFlag('"migrate" only applies to PostgreSQL'))
    .option('--schema <name>', 'schema holding the records table (letters, digits, _)', schemaFlag, DEFAULT_SCHEMA)
    .addHelpText('after', '\nExit codes: 0 migrated (or already up to date), 2 usage error or the database cannot be reached or refused.')
    .action(async (flags: MigrateFlags, command: Command) => {
      const schema = schemaOf(flags.store, command);
      const { migrate } = await loadPeer(() => import('../migrate.js'));
      const result = await migrate({ connectionString: flags.store.driverUrl, schema }).catch((error: unknown) => {
        throw unreachableStore(flags.store.url, error);
      });
      const what = result.applied.length === 0 ? 'already up to date' : `applied ${result.applied.join(', ')}`;
      process.stdout.write(`retrysafe: schema "${result.schema}" at version ${result.version} (${what})\n`);
    });
}
