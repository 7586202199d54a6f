/**
 * Options of the SQLite store and their validation (once, in the factory).
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import type { Database } from 'better-sqlite3';
import { systemClock, type Clock } from '../../core/clock.js';
import { requireClock, requireGenerateId, requireOptions } from '../../core/options.js';
import { describe, requireDurationMs } from '../../core/duration.js';
import { requireSqliteSource, type SqliteSource } from './source.js';

/** Options of `createSqliteStore`. Durations are in milliseconds. */
export interface SqliteStoreOptions {
  /**
   * Database file to open (created when missing; opened in WAL journal mode), or `':memory:'`.
   * Must be absent when `database` is given. @defaultValue ':memory:'
   */
  readonly path?: string;
  /**
   * A `better-sqlite3` connection to use instead of opening one. The store does not change its journal
   * mode, sets `busy_timeout` only when `busyTimeoutMs` is given, and leaves it open on `close()`.
   */
  readonly database?: Database;
  /**
   * Name of the record table; its migration ledger is `<table>_migrations`. Letters, digits and
   * underscores, starting with a letter or underscore, at most 48 characters. @defaultValue 'retrysafe_records'
   */
  readonly table?: string;
  /** Time source for leases and retention. @defaultValue the system clock */
  readonly clock?: Clock;
  /** Fencing-token generator. @defaultValue `crypto.randomUUID` */
  readonly generateId?: () => string;
  /**
   * How long a statement waits for another process's write lock on the same file before failing with
   * `SQLITE_BUSY`. The wait blocks the event loop (the driver is synchronous). @defaultValue 5_000
   */
  readonly busyTimeoutMs?: number;
  /**
   * `false` opens an existing store only, for tools that must not create anything: the file named by
   * `path` must exist (it is never created) and its record table must be migrated already; the schema is
   * neither created nor upgraded and the journal mode is left as it is. The factory then throws an `Error`
   * naming the file or the table when either is missing. @defaultValue true
   */
  readonly migrate?: boolean;
}

/** Validated, frozen options. */
export interface ResolvedSqliteStoreOptions {
  readonly source: SqliteSource;
  readonly table: string;
  readonly clock: Clock;
  readonly generateId: () => string;
  readonly busyTimeoutMs: number | undefined;
  readonly migrate: boolean;
}

const DEFAULT_BUSY_TIMEOUT_MS = 5_000;
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,47}$/;

/**
 * Validates the options of `createSqliteStore`.
 *
 * @throws TypeError naming the option and the value when an option is invalid
 */
export function resolveSqliteStoreOptions(options: SqliteStoreOptions | undefined): ResolvedSqliteStoreOptions {
  if (options === undefined) options = {};
  requireOptions('createSqliteStore', options);
  const source = requireSqliteSource(options.path, options.database);
  const table = options.table ?? 'retrysafe_records';
  if (typeof table !== 'string' || !IDENTIFIER.test(table)) {
    throw new TypeError(
      `retrysafe: option "table" must be an identifier of letters, digits and underscores (at most 48), got ${describe(table)}`,
    );
  }
  const clock = requireClock(options.clock ?? systemClock);
  const generateId = requireGenerateId(options.generateId ?? randomUUID);
  const busyTimeoutMs =
    options.busyTimeoutMs !== undefined
      ? requireDurationMs('busyTimeoutMs', options.busyTimeoutMs)
      : 'path' in source
        ? DEFAULT_BUSY_TIMEOUT_MS
        : undefined;
  const migrate = options.migrate ?? true;
  if (typeof migrate !== 'boolean') throw new TypeError(`retrysafe: option "migrate" must be a boolean, got ${describe(migrate)}`);
  return Object.freeze({
    migrate,
    source: Object.freeze(source),
    table,
    clock,
    generateId,
    busyTimeoutMs,
  });
}
