/**
 * The PostgreSQL schema of every module in one sequence: the idempotency records' (with the recovery
 * points atomic phases save), the inbox's, the outbox's and client sessions' migrations, each kept beside
 * its module's code, gathered here by number and applied by {@link migrate} under one ledger, `<schema>.schema_migrations`.
 *
 * | module | its list |
 * | --- | --- |
 * | idempotency records and recovery points | `stores/postgres/migrations/idempotency.ts` |
 * | inbox | `messaging/inbox/migrations/postgres/index.ts` |
 * | outbox | `messaging/outbox/migrations/postgres/index.ts` |
 * | client sessions | `sessions/migrations/postgres/index.ts` |
 *
 * Numbers are shared, not per module: a new migration takes the next free number, lives in its module's
 * folder and is appended to its module's list; released migrations never change, because the ledger
 * records them as applied.
 *
 * @module
 */
import { EVENTS_MIGRATIONS } from './events/migrations/postgres/index.js';
import { INBOX_MIGRATIONS } from './messaging/inbox/migrations/postgres/index.js';
import { OUTBOX_MIGRATIONS } from './messaging/outbox/migrations/postgres/index.js';
import { SESSIONS_MIGRATIONS } from './sessions/migrations/postgres/index.js';
import { applyMigrations, type MigrateOptions, type MigrateResult } from './stores/postgres/migrate.js';
import { sequence, type Migration } from './stores/postgres/migration.js';
import { IDEMPOTENCY_MIGRATIONS } from './stores/postgres/migrations/idempotency.js';

/** Every migration, in the order {@link migrate} applies them. */
export const MIGRATIONS: readonly Migration[] = sequence(
  IDEMPOTENCY_MIGRATIONS,
  INBOX_MIGRATIONS,
  OUTBOX_MIGRATIONS,
  SESSIONS_MIGRATIONS,
  EVENTS_MIGRATIONS,
);

/**
 * Creates the schema (if missing) and applies every module's migration not yet in its ledger table
 * `<schema>.schema_migrations (version, name, applied_at)`: the records table and its `claim()` function,
 * the inbox, the outbox, recovery points and client sessions.
 *
 * Concurrency: the whole run holds a session advisory lock per schema (`pg_advisory_lock`), so concurrent
 * runs queue up and each later one finds the ledger complete. Each migration runs in its own transaction
 * together with its ledger row, so a failure leaves the schema at the last complete version.
 *
 * @throws TypeError naming the option when the options are invalid (neither or both of `pool` and
 *   `connectionString`, a bad `schema`)
 * @throws SchemaTooNewError (code `store-schema-too-new`) when the ledger records a version newer than
 *   this release knows (a newer retrysafe migrated the schema; downgrading is not supported); nothing is
 *   applied then
 * @throws the driver's error when the database refuses (connection, permissions, SQL); the failing
 *   migration is rolled back
 * @example
 * ```ts
 * import { migrate } from 'retrysafe/postgres';
 * const { applied } = await migrate({ connectionString: process.env.DATABASE_URL, schema: 'retrysafe' });
 * ```
 */
export function migrate(options: MigrateOptions): Promise<MigrateResult> {
  return applyMigrations(MIGRATIONS, options);
}
