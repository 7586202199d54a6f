/**
 * The SQLite inbox store (`better-sqlite3`), for single-process consumers: handlers get the connection,
 * inside a transaction that also holds the processed mark.
 *
 * @module
 */
import type { Database } from 'better-sqlite3';
import { systemClock } from '../../core/clock.js';
import { requireOptions } from '../../core/validate.js';
import { openSqlite, quoteIdentifier } from '../../stores/sqlite/open.js';
import { requireSqlitePrefix, requireSqliteSource } from '../../stores/sqlite/source.js';
import type { InboxStore } from './store.js';
import { inboxSqliteSchema } from './migrations/sqlite.js';
import * as sqliteInbox from './sqlite-inbox-store.js';

/** Options of {@link createSqliteInboxStore}: at most one of `path` and `database`. */
export interface SqliteInboxStoreOptions {
  /** Database file to open (WAL journal mode), or `':memory:'`. @defaultValue ':memory:' */
  readonly path?: string;
  /** A connection to use instead (left open on `close`), e.g. the one the business tables live in. */
  readonly database?: Database;
  /**
   * Prefix of the tables `<prefix>_processed`, `<prefix>_attempts` and the ledger `<prefix>_migrations`.
   * Letters, digits, `_`; at most 40. @defaultValue 'retrysafe_inbox'
   */
  readonly prefix?: string;
}

/** The SQLite inbox store; `database` is the connection handlers write through. */
export interface SqliteInboxStore extends InboxStore<Database> {
  readonly database: Database;
}

/**
 * Creates a SQLite {@link InboxStore}, migrating its tables. All operations of one store run one at a
 * time (a FIFO mutex), because while a handler awaits, the single connection is inside its transaction;
 * keep handlers short. Several processes on one file serialize on SQLite's write lock (`BEGIN IMMEDIATE`).
 *
 * Handler timeout: the transaction is rolled back only once the handler settles, because until then the
 * handler may still write on the shared connection, and those writes must land inside the transaction
 * that is rolled back rather than outside any. The `signal` is aborted at the deadline so it can stop.
 *
 * @throws TypeError naming the option when an option is invalid
 * @throws the driver's error when the file cannot be opened or migrated
 * @throws SchemaTooNewError (`store-schema-too-new`) when a newer retrysafe migrated the tables (downgrading is not supported)
 * @example
 * ```ts
 * import Database from 'better-sqlite3';
 * const database = new Database('app.db');
 * const inbox = createInbox({ store: createSqliteInboxStore({ database }) });
 * await inbox.handle({ consumer: 'mailer', messageId }, async (tx) => {
 *   tx.prepare('INSERT INTO sent (id) VALUES (?)').run(messageId);
 * });
 * ```
 */
export function createSqliteInboxStore(options: SqliteInboxStoreOptions = {}): SqliteInboxStore {
  requireOptions('createSqliteInboxStore', options);
  const source = requireSqliteSource(options.path, options.database);
  const prefix = requireSqlitePrefix(options.prefix, 'retrysafe_inbox');
  const name = (suffix: string): string => quoteIdentifier(`${prefix}_${suffix}`);
  // The ledger records no time, so the clock is never read; busy_timeout stays the driver's (5 s on a file it opens).
  const opening = { source, busyTimeoutMs: undefined, migrate: true, schema: inboxSqliteSchema(prefix), clock: systemClock };
  return openSqlite(opening, (connection, owned) => new sqliteInbox.SqliteInboxStore(connection, owned, name));
}

