/**
 * The SQLite session store's schema steps (`createSqliteSessionStore` applies them with `openSqlite`):
 * sessions and their requests, in tables named after the store's `table`. Times are integer milliseconds
 * since the epoch.
 *
 * @module
 */
import { quoteIdentifier, type SqliteSchema } from '../../stores/sqlite/open.js';

/** One schema step of the SQLite session store; `sql` gets the quoted sessions table, requests table and index. */
interface SessionsSqliteMigration {
  readonly version: number;
  readonly name: string;
  readonly sql: (sessions: string, requests: string, index: string) => string;
}

/** The steps, in order, recorded in `<table>_migrations`. Never edit a released step; append a new one. */
const SESSIONS_SQLITE_MIGRATIONS: readonly SessionsSqliteMigration[] = [
  {
    version: 1,
    name: 'init',
    sql: (sessions, requests, index) => `
      CREATE TABLE ${sessions} (
        client_id        TEXT    PRIMARY KEY,
        state            TEXT    NOT NULL CHECK (state IN ('live', 'expired')),
        lease_expires_at INTEGER NOT NULL,
        low_water_mark   INTEGER NOT NULL
      );
      CREATE INDEX ${index} ON ${sessions} (lease_expires_at);
      CREATE TABLE ${requests} (
        client_id        TEXT    NOT NULL,
        request_number   INTEGER NOT NULL,
        state            TEXT    NOT NULL CHECK (state IN ('in_progress', 'completed')),
        token            TEXT    NOT NULL,
        lease_expires_at INTEGER NOT NULL,
        response         TEXT,
        PRIMARY KEY (client_id, request_number)
      ) WITHOUT ROWID;
    `,
  },
];

/**
 * The schema of the sessions table `table` (validated) and its `<table>_requests`: the steps above, and the
 * ledger `<table>_migrations`, which records each step's version and time of application (as the session
 * store's first release created it).
 */
export function sessionsSqliteSchema(table: string): SqliteSchema {
  const sql = (step: SessionsSqliteMigration): string =>
    step.sql(quoteIdentifier(table), quoteIdentifier(`${table}_requests`), quoteIdentifier(`${table}_lease_expires_at`));
  return {
    table,
    ledger: `${table}_migrations`,
    ledgerColumns: ['applied_at'],
    steps: SESSIONS_SQLITE_MIGRATIONS.map((step) => ({ version: step.version, name: step.name, sql: sql(step) })),
  };
}
