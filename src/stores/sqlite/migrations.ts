/**
 * The SQLite idempotency store's schema as numbered, append-only steps, recorded in a ledger table
 * (`<table>_migrations`) so that several stores, processes and versions agree on what is applied.
 * `openSqlite` (`open.ts`) applies them.
 *
 * @module
 */
import { quoteIdentifier, type SqliteSchema } from './open.js';

/** One schema step. `sql` receives the quoted record table and its quoted index-name prefix. */
interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: (table: string, prefix: (suffix: string) => string) => string;
}

/**
 * The steps, in order. Never edit a released step; append a new one.
 *
 * The body is a BLOB so that every byte (NUL, invalid UTF-8) replays as sent; headers are JSON text.
 * Times are integer milliseconds since the epoch from the store's clock.
 */
const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'init',
    sql: (table, prefix) => `
      CREATE TABLE ${table} (
        scope             TEXT    NOT NULL,
        idempotency_key   TEXT    NOT NULL,
        fingerprint       TEXT    NOT NULL,
        state             TEXT    NOT NULL CHECK (state IN ('in_progress', 'completed')),
        lease_token       TEXT    NOT NULL,
        lease_expires_at  INTEGER NOT NULL,
        recovery_point    TEXT,
        response_status   INTEGER,
        response_headers  TEXT,
        response_body     BLOB,
        created_at        INTEGER NOT NULL,
        completed_at      INTEGER,
        expires_at        INTEGER NOT NULL,
        PRIMARY KEY (scope, idempotency_key)
      );
      CREATE INDEX ${prefix('expires_at')} ON ${table} (expires_at);
    `,
  },
  {
    version: 2,
    name: 'abandoned_index',
    // Serves listAbandoned; partial, so it holds only multi-phase records still in progress.
    sql: (table, prefix) => `
      CREATE INDEX ${prefix('abandoned')} ON ${table} (lease_expires_at)
        WHERE state = 'in_progress' AND recovery_point IS NOT NULL;
    `,
  },
];

/**
 * The schema of the record table `table` (validated): the steps above, and the ledger `<table>_migrations`,
 * which records each step's version, name and time of application.
 */
export function recordsSchema(table: string): SqliteSchema {
  const records = quoteIdentifier(table);
  const prefix = (suffix: string): string => quoteIdentifier(`${table}_${suffix}`);
  return {
    table,
    ledger: `${table}_migrations`,
    ledgerColumns: ['name', 'applied_at'],
    steps: MIGRATIONS.map((step) => ({ version: step.version, name: step.name, sql: step.sql(records, prefix) })),
  };
}
