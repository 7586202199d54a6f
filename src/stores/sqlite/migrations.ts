/**
 * The SQLite schema as numbered, append-only migration steps, recorded in a ledger table
 * (`<table>_migrations`) so that several stores, processes and versions agree on what is applied.
 *
 * @module
 */
import type { Database } from 'better-sqlite3';
import type { Clock } from '../../core/clock.js';

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

/** Double-quotes an already validated identifier. */
export function quoteIdentifier(name: string): string {
  return `"${name}"`;
}

/**
 * Brings the schema of `table` up to date, idempotently. Runs under `BEGIN IMMEDIATE` (or a savepoint
 * when the connection is already in a transaction) so concurrent processes apply each step once.
 *
 * @throws Error when the ledger records a version newer than this release knows (a newer retrysafe
 *   migrated the database; downgrading is not supported)
 */
export function migrate(database: Database, table: string, clock: Clock): void {
  const records = quoteIdentifier(table);
  const ledger = quoteIdentifier(`${table}_migrations`);
  const prefix = (suffix: string): string => quoteIdentifier(`${table}_${suffix}`);
  const apply = database.transaction(() => {
    database.exec(`CREATE TABLE IF NOT EXISTS ${ledger} (
      version    INTEGER PRIMARY KEY,
      name       TEXT    NOT NULL,
      applied_at INTEGER NOT NULL
    )`);
    const applied = new Set(
      database
        .prepare(`SELECT version FROM ${ledger}`)
        .safeIntegers(false)
        .pluck()
        .all()
        .map((version) => Number(version)),
    );
    const latest = MIGRATIONS[MIGRATIONS.length - 1]?.version ?? 0;
    const unknown = [...applied].filter((version) => version > latest);
    if (unknown.length > 0) {
      throw new Error(
        `retrysafe: table ${records} was migrated to version ${Math.max(...unknown)} by a newer retrysafe; this release knows up to ${latest}`,
      );
    }
    const record = database.prepare(`INSERT INTO ${ledger} (version, name, applied_at) VALUES (?, ?, ?)`);
    for (const step of MIGRATIONS) {
      if (applied.has(step.version)) continue;
      database.exec(step.sql(records, prefix));
      record.run(step.version, step.name, clock.now());
    }
  });
  apply.immediate();
}
