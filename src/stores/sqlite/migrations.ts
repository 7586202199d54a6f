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
  {
    version: 3,
    name: 'fencing_token',
    // The claims' fencing tokens. `<table>_fence` holds one row, the last token handed out; every claim
    // that inserts a record or takes one over sets the record's `fence` to that number plus one (in its
    // own statement, under the file's write lock), and the triggers move the counter up to it in the same
    // statement, so no two claims get the same token and a later claim always gets a larger one, after a
    // release or a reap too (the counter outlives the row). Records claimed before this step keep a NULL
    // `fence` (their claims carry no token) until they are claimed again.
    sql: (table, prefix) => `
      ALTER TABLE ${table} ADD COLUMN fence INTEGER;
      CREATE TABLE ${prefix('fence')} (only_row INTEGER PRIMARY KEY CHECK (only_row = 1), last INTEGER NOT NULL);
      INSERT INTO ${prefix('fence')} (only_row, last) VALUES (1, 0);
      CREATE TRIGGER ${prefix('fence_insert')} AFTER INSERT ON ${table} WHEN NEW.fence IS NOT NULL
      BEGIN
        UPDATE ${prefix('fence')} SET last = NEW.fence WHERE last < NEW.fence;
      END;
      CREATE TRIGGER ${prefix('fence_update')} AFTER UPDATE OF fence ON ${table} WHEN NEW.fence IS NOT NULL
      BEGIN
        UPDATE ${prefix('fence')} SET last = NEW.fence WHERE last < NEW.fence;
      END;
    `,
  },
  {
    version: 4,
    name: 'replay_text',
    // A completed record in one text beside its body, so a replay reads two values instead of every
    // column (docs/hot-path.md#sqlite-replay-read): what the completion knew (status, completion time,
    // retention end, the headers' JSON, with its length) and a JSON array of what the record held
    // (lease end, creation time, fingerprint, lease token, recovery point). Written by the completion in
    // the statement that completes, which leaves `response_status`, `response_headers` and `completed_at`
    // NULL (the text holds them); set to NULL by any claim that replaces the record; NULL on records
    // completed before this step, which keep those columns and are read from them.
    sql: (table) => `ALTER TABLE ${table} ADD COLUMN replay TEXT;`,
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
