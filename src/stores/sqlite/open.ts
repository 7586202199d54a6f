/**
 * The SQLite kit's one routine to open a store's connection and bring its tables up to date. Each module
 * that keeps tables in SQLite (the idempotency store, the inbox store, the session store) calls it with its
 * own ordered schema steps and its own migration ledger; opening, the ledger's bookkeeping, the refusal of
 * a newer schema and the clean-up after a failure are the same for all of them.
 *
 * @module
 */
import BetterSqlite3, { type Database } from 'better-sqlite3';
import type { Clock } from '../../core/clock.js';
import { SchemaTooNewError } from '../../core/errors.js';
import type { SqliteSynchronous } from './options.js';
import type { SqliteSource } from './source.js';

/** One schema step, its SQL already naming the module's tables. Never edit a released step; append one. */
interface SqliteStep {
  /** Position in the module's steps, from 1: the ledger's primary key. */
  readonly version: number;
  /** What the step does, e.g. `init`; recorded where the ledger has a `name` column. */
  readonly name: string;
  /** The step's statements (several may be given). */
  readonly sql: string;
}

/**
 * What a module's tables are and how they got there: its steps, in version order, and the ledger that
 * records which of them a database has.
 */
export interface SqliteSchema {
  /** The module's main table (unquoted), named in errors and checked for when opening without migrating. */
  readonly table: string;
  /**
   * The ledger table (unquoted): one row per applied step, with `version` (the primary key) and the other
   * columns in {@link SqliteSchema.ledgerColumns}.
   */
  readonly ledger: string;
  /**
   * What the ledger records besides the version, as the module's first release created it (and so as every
   * file it wrote has it): `name` (the step's name) and `applied_at` (ms since the epoch, from the clock
   * given to {@link openSqlite}). A module never changes this list, so its files open unchanged.
   */
  readonly ledgerColumns: readonly ('name' | 'applied_at')[];
  /** The steps, in version order from 1. */
  readonly steps: readonly SqliteStep[];
}

/** What {@link openSqlite} opens and how. */
interface SqliteOpening {
  /** A file to open (`':memory:'` for none), or a `better-sqlite3` connection of the caller's, left open. */
  readonly source: SqliteSource;
  /** Sets `busy_timeout` (ms) on the connection; `undefined` leaves the connection's own (the driver's default is 5 000). */
  readonly busyTimeoutMs: number | undefined;
  /**
   * Sets `PRAGMA synchronous` on the connection (see the idempotency store's `synchronous` option);
   * absent or `undefined` leaves the connection's own (NORMAL for a file in WAL mode, as better-sqlite3
   * builds SQLite).
   */
  readonly synchronous?: SqliteSynchronous | undefined;
  /**
   * `false` opens an existing store only, creating nothing: the file must exist, its journal mode is left
   * as it is, and `schema.table` must be there already; the schema is neither created nor upgraded.
   */
  readonly migrate: boolean;
  readonly schema: SqliteSchema;
  /** The time the ledger records, in ms since the epoch: the store's injected clock. */
  readonly clock: Clock;
}

/**
 * Opens (or adopts) the connection, sets `busy_timeout` and `synchronous` (when given), puts a file it opened in WAL journal mode (so
 * readers in other processes proceed while one process writes), brings the schema up to date with
 * {@link migrateSqlite}, and hands the connection to `build`, which prepares the store. When any of that
 * throws, a connection it opened is closed again; a given one is left open.
 *
 * @returns what `build` returns; `owned` tells `build` whether the connection is the store's to close
 * @throws the driver's error when the file cannot be opened (with `migrate: false`, when it does not exist)
 * @throws Error naming the table when `migrate` is false and `schema.table` does not exist
 * @throws SchemaTooNewError naming the table when the ledger records a version newer than `schema.steps`
 *   knows (see {@link migrateSqlite})
 */
export function openSqlite<T>(opening: SqliteOpening, build: (database: Database, owned: boolean) => T): T {
  const { source, busyTimeoutMs, synchronous, migrate, schema, clock } = opening;
  const owned = 'path' in source;
  const database = 'path' in source ? new BetterSqlite3(source.path, { fileMustExist: !migrate }) : source.database;
  try {
    if (busyTimeoutMs !== undefined) database.pragma(`busy_timeout = ${busyTimeoutMs}`);
    if (synchronous !== undefined) database.pragma(`synchronous = ${synchronous}`);
    if (migrate) {
      if (owned && !database.memory) database.pragma('journal_mode = WAL');
      migrateSqlite(database, schema, clock);
    } else if (database.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(schema.table) === undefined) {
      throw new Error(`retrysafe: table "${schema.table}" does not exist in ${database.name}; open the store once with migrations on`);
    }
    return build(database, owned);
  } catch (error) {
    if (owned) database.close();
    throw error;
  }
}

/**
 * Brings `schema` up to date on `database`, idempotently: creates the ledger when missing, then applies
 * each step the ledger lacks, in version order, recording it. Runs under `BEGIN IMMEDIATE` (a savepoint
 * when the connection is already in a transaction), so concurrent processes apply each step once.
 * Versions are read as numbers even on a connection that defaults to BigInt.
 *
 * @throws SchemaTooNewError naming the table when the ledger records a version newer than `schema.steps`
 *   knows (a newer retrysafe migrated the database; downgrading is not supported); nothing is applied then
 * @throws the driver's error when a step fails; nothing of this call is applied then
 */
export function migrateSqlite(database: Database, schema: SqliteSchema, clock: Clock): void {
  const ledger = quoteIdentifier(schema.ledger);
  const columns = ['version', ...schema.ledgerColumns] as const;
  const apply = database.transaction(() => {
    database.exec(`CREATE TABLE IF NOT EXISTS ${ledger} (${columns.map((column) => LEDGER_COLUMN[column]).join(', ')})`);
    const applied = new Set(
      database
        .prepare(`SELECT version FROM ${ledger}`)
        .safeIntegers(false)
        .pluck()
        .all()
        .map((version) => Number(version)),
    );
    const latest = schema.steps.at(-1)?.version ?? 0;
    const newer = [...applied].filter((version) => version > latest);
    if (newer.length > 0) {
      throw new SchemaTooNewError(`table "${schema.table}"`, Math.max(...newer), latest);
    }
    const record = database.prepare(`INSERT INTO ${ledger} (${columns.join(', ')}) VALUES (${columns.map(() => '?').join(', ')})`);
    for (const step of schema.steps) {
      if (applied.has(step.version)) continue;
      database.exec(step.sql);
      const recorded = { name: step.name, applied_at: clock.now() };
      record.run(step.version, ...schema.ledgerColumns.map((column) => recorded[column]));
    }
  });
  apply.immediate();
}

/** The ledger's column definitions. */
const LEDGER_COLUMN: Readonly<Record<'version' | 'name' | 'applied_at', string>> = Object.freeze({
  version: 'version INTEGER PRIMARY KEY',
  name: 'name TEXT NOT NULL',
  applied_at: 'applied_at INTEGER NOT NULL',
});

/** Double-quotes an already validated identifier. */
export function quoteIdentifier(name: string): string {
  return `"${name}"`;
}
