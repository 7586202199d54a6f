/**
 * `retrysafe migrate --store postgres://…[?schema=name] [--schema name]`: creates the schema and applies the numbered
 * PostgreSQL migrations of every module (see `src/migrate.ts`). Safe to run at every deploy, twice, or from
 * several hosts at once (advisory lock + ledger table).
 *
 * `retrysafe migrate --store dynamodb://TABLE?region=…`: creates the DynamoDB table when it is missing and
 * enables TTL on it (`createDynamodbTable`); idempotent too.
 *
 * Exit codes: 0 migrated or already up to date; 2 usage error (a `--store` that is neither a PostgreSQL
 * nor a DynamoDB URL, a bad `--schema`, or a `--schema` that differs from the URL's `?schema=`), or the
 * database cannot be reached or refuses (one line naming the URL, password redacted), or its driver (`pg`,
 * `@aws-sdk/client-dynamodb`) is not installed.
 *
 * @module
 */
import type { Command } from 'commander';
import { DEFAULT_SCHEMA } from '../stores/postgres/schema.js';
import { loadPeer } from './peer.js';
import { schemaFlag, schemaOf, storeFlag } from './store-flag.js';
import { unreachableStore, type StoreTarget } from '../store-url.js';
import { InvalidArgumentError } from 'commander';

interface MigrateFlags {
  readonly store: StoreTarget;
}

/** Adds the `migrate` command to `program`. */
export function register(program: Command): void {
  program
    .command('migrate')
    .description('Create the idempotency schema on PostgreSQL and apply any pending migrations, or create the DynamoDB table (idempotent).')
    .requiredOption('--store <url>', 'PostgreSQL or DynamoDB URL, e.g. postgres://user@127.0.0.1:5432/app or dynamodb://idempotency?region=eu-west-1', migrateStoreFlag)
    .option('--schema <name>', 'schema holding the records table (letters, digits, _)', schemaFlag, DEFAULT_SCHEMA)
    .addHelpText('after', '\nExit codes: 0 migrated (or already up to date), 2 usage error or the database cannot be reached or refused.')
    .action(async (flags: MigrateFlags, command: Command) => {
      if (flags.store.scheme === 'dynamodb') return migrateDynamodb(flags.store);
      const schema = schemaOf(flags.store, command);
      const { migrate } = await loadPeer(() => import('../migrate.js'));
      const result = await migrate({ connectionString: flags.store.driverUrl, schema }).catch((error: unknown) => {
        throw unreachableStore(flags.store.url, error);
      });
      const what = result.applied.length === 0 ? 'already up to date' : `applied ${result.applied.join(', ')}`;
      process.stdout.write(`retrysafe: schema "${result.schema}" at version ${result.version} (${what})\n`);
    });
}

/**
 * Commander argument parser for `migrate`'s `--store`: a PostgreSQL or a DynamoDB URL.
 *
 * @throws InvalidArgumentError (exit 2) for a bad `--store` or one naming another store
 */
function migrateStoreFlag(text: string): StoreTarget {
  const target = storeFlag(text);
  if (target.scheme !== 'postgres' && target.scheme !== 'postgresql' && target.scheme !== 'dynamodb') {
    throw new InvalidArgumentError(
      `--store must be a postgres://, postgresql:// or dynamodb:// URL; "migrate" only applies to PostgreSQL and DynamoDB, got ${JSON.stringify(text)}.`,
    );
  }
  return target;
}

/** Creates the DynamoDB table `target` names (with TTL on) unless it exists. */
async function migrateDynamodb(target: StoreTarget): Promise<void> {
  const { parseDynamodbUrl } = await import('../stores/dynamodb/target.js');
  const parsed = parseDynamodbUrl(target.url);
  if (typeof parsed === 'string') throw new InvalidArgumentError(parsed);
  const { clientFor } = await loadPeer(() => import('../stores/dynamodb/url.js'));
  const { createDynamodbTable } = await import('../stores/dynamodb/table.js');
  const client = clientFor(parsed);
  try {
    const result = await createDynamodbTable(client, parsed).catch((error: unknown) => {
      throw unreachableStore(target.url, error);
    });
    const what = result.created ? 'created' : 'already there';
    process.stdout.write(`retrysafe: DynamoDB table "${parsed.table}" ${what}, TTL on attribute "${parsed.ttlAttribute}"\n`);
  } finally {
    client.destroy();
  }
}
