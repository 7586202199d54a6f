/**
 * The SQLite inbox's schema steps (`createSqliteInboxStore` applies them): the processed marks and the
 * attempts, in tables named after the store's prefix. Times are integer milliseconds since the epoch.
 *
 * @module
 */

/** One schema step of the SQLite inbox; `sql` gets the quoted table name for a suffix (`processed`, …). */
export interface InboxSqliteMigration {
  readonly version: number;
  readonly sql: (p: (suffix: string) => string) => string;
}

/** The steps, in order, recorded in `<prefix>_migrations`. Never edit a released step; append a new one. */
export const INBOX_SQLITE_MIGRATIONS: readonly InboxSqliteMigration[] = [
  {
    version: 1,
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
];
