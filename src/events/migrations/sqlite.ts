/**
 * The SQLite event store's schema steps (`createSqliteEventStore` applies them with `openSqlite`): the
 * events table named after the store's prefix. Times are integer milliseconds since the epoch.
 *
 * @module
 */
import { quoteIdentifier, type SqliteSchema } from '../../stores/sqlite/open.js';

/** The steps, in order, recorded in `<prefix>_migrations`. Never edit a released step; append a new one. */
const EVENTS_SQLITE_STEPS: readonly { readonly version: number; readonly name: string; readonly sql: (p: (suffix: string) => string) => string }[] = [
  {
    version: 1,
    name: 'init',
    sql: (p) => `
      CREATE TABLE ${p('events')} (
        position     INTEGER PRIMARY KEY AUTOINCREMENT,
        stream       TEXT    NOT NULL,
        version      INTEGER NOT NULL CHECK (version >= 0),
        event_id     TEXT    NOT NULL,
        type         TEXT    NOT NULL,
        data         TEXT    NOT NULL,
        metadata     TEXT    NOT NULL,
        content_hash TEXT    NOT NULL,
        appended_at  INTEGER NOT NULL,
        UNIQUE (stream, version),
        UNIQUE (stream, event_id)
      );
    `,
  },
];

/** The schema of the event tables under `prefix` (validated), with the ledger `<prefix>_migrations`. */
export function eventsSqliteSchema(prefix: string): SqliteSchema {
  const name = (suffix: string): string => quoteIdentifier(`${prefix}_${suffix}`);
  return {
    table: `${prefix}_events`,
    ledger: `${prefix}_migrations`,
    ledgerColumns: ['name', 'applied_at'],
    steps: EVENTS_SQLITE_STEPS.map((step) => ({ version: step.version, name: step.name, sql: step.sql(name) })),
  };
}
