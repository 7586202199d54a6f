/**
 * The SQLite inbox's schema steps (`createSqliteInboxStore` applies them with `openSqlite`): the processed
 * marks and the attempts, in tables named after the store's prefix. Times are integer milliseconds since
 * the epoch.
 *
 * @module
 */
import { quoteIdentifier, type SqliteSchema } from '../../../stores/sqlite/open.js';

/** One schema step of the SQLite inbox; `sql` gets the quoted table name for a suffix (`processed`, …). */
interface InboxSqliteMigration {
  readonly version: number;
  readonly name: string;
  readonly sql: (p: (suffix: string) => string) => string;
}

/** The steps, in order, recorded in `<prefix>_migrations`. Never edit a released step; append a new one. */
const INBOX_SQLITE_MIGRATIONS: readonly InboxSqliteMigration[] = [
  {
    version: 1,
    name: 'init',
    sql: (p) => `
      CREATE TABLE ${p('processed')} (
        consumer     TEXT    NOT NULL,
        message_id   TEXT    NOT NULL,
        processed_at INTEGER NOT NULL,
        PRIMARY KEY (consumer, message_id)
      );
      CREATE INDEX ${p('processed_at')} ON ${p('processed')} (processed_at);
      CREATE TABLE ${p('attempts')} (
        consumer            TEXT    NOT NULL,
        message_id          TEXT    NOT NULL,
        attempts            INTEGER NOT NULL,
        first_attempt_at    INTEGER NOT NULL,
        last_attempt_at     INTEGER NOT NULL,
        dead_lettered_at    INTEGER,
        replay_requested_at INTEGER,
        last_error          TEXT,
        headers             TEXT,
        body                BLOB,
        PRIMARY KEY (consumer, message_id)
      );
      CREATE INDEX ${p('attempts_dead')} ON ${p('attempts')} (dead_lettered_at) WHERE dead_lettered_at IS NOT NULL;
    `,
  },
  {
    // "replay" names the HTTP replay of a saved response; the column records a dead letter's redrive.
    version: 2,
    name: 'redrive_requested_at',
    sql: (p) => `ALTER TABLE ${p('attempts')} RENAME COLUMN replay_requested_at TO redrive_requested_at;`,
  },
];

/**
 * The schema of the inbox tables under `prefix` (validated): the steps above, and the ledger
 * `<prefix>_migrations`, which records only each step's version (as the inbox's first release created it).
 */
export function inboxSqliteSchema(prefix: string): SqliteSchema {
  const name = (suffix: string): string => quoteIdentifier(`${prefix}_${suffix}`);
  return {
    table: `${prefix}_attempts`,
    ledger: `${prefix}_migrations`,
    ledgerColumns: [],
    steps: INBOX_SQLITE_MIGRATIONS.map((step) => ({ version: step.version, name: step.name, sql: step.sql(name) })),
  };
}
