/**
 * The SQLite session store's schema steps (`createSqliteSessionStore` applies them): sessions and their
 * requests, in tables named after the store's `table`. Times are integer milliseconds since the epoch.
 *
 * @module
 */

/** One schema step of the SQLite session store; `sql` gets the quoted sessions table, requests table and index. */
export interface SessionsSqliteMigration {
  readonly version: number;
  readonly sql: (sessions: string, requests: string, index: string) => string;
}

/** The steps, in order, recorded in `<table>_migrations`. Never edit a released step; append a new one. */
export const SESSIONS_SQLITE_MIGRATIONS: readonly SessionsSqliteMigration[] = [
  {
    version: 1,
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
