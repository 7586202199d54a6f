/**
 * Options of the SQLite store and their validation (once, in the factory).
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import type { Database } from 'better-sqlite3';
import { systemClock, type Clock } from '../../core/clock.js';
import { invalidOption, requireBoolean, requireClock, requireDurationMs, requireGenerateId, requireOptions } from '../../core/validate.js';
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
  /**
   * When a commit reaches the disk, as SQLite's `PRAGMA synchronous` in WAL mode
   * (https://www.sqlite.org/pragma.html#pragma_synchronous, https://www.sqlite.org/wal.html):
   * - `'normal'`: a commit is written to the WAL file but not flushed; the WAL is flushed at each
   *   checkpoint. A commit survives a crash of the process (SIGKILL, out of memory, an uncaught error),
   *   since the operating system holds what was written; a power loss or an operating-system crash may
   *   undo the last commits (the file stays consistent). A record lost that way is a key seen for the
   *   first time again: its retry executes again (in transactional mode, with the business writes of the
   *   same commit undone too).
   * - `'full'`: every commit is flushed (`fsync`) before it returns, so it survives a power loss too;
   *   each commit then waits for the disk (a claim and a completion are two commits per new key), and
   *   the driver being synchronous, the event loop waits with it.
   *
   * Applied to a file the store opens, whatever `migrate` says; on a connection passed as `database`,
   * only when given (the connection keeps its own setting otherwise). The setting lasts as long as the
   * connection and is not stored in the file. @defaultValue 'normal' (what better-sqlite3 builds SQLite to
   * use in WAL mode)
   */
  readonly synchronous?: SqliteSynchronous;
}

/** The values of {@link SqliteStoreOptions.synchronous}. */
export type SqliteSynchronous = 'normal' | 'full';

/** The accepted values of {@link SqliteStoreOptions.synchronous}, for validation and the store URL. */
export const SQLITE_SYNCHRONOUS: readonly SqliteSynchronous[] = Object.freeze(['normal', 'full']);

/** Validated, frozen options. */
interface ResolvedSqliteStoreOptions {
  readonly source: SqliteSource;
  readonly table: string;
  readonly clock: Clock;
  readonly generateId: () => string;
  readonly busyTimeoutMs: number | undefined;
  readonly migrate: boolean;
  /** `undefined` leaves a caller-provided connection's own setting alone. */
  readonly synchronous: SqliteSynchronous | undefined;
}

const DEFAULT_BUSY_TIMEOUT_MS = 5_000;
const DEFAULT_SYNCHRONOUS: SqliteSynchronous = 'normal';
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
  if (typeof table !== 'string' || !IDENTIFIER.test(table)) throw invalidOption('table', 'an identifier of letters, digits and underscores (at most 48)', table);
  const clock = requireClock(options.clock ?? systemClock);
  const generateId = requireGenerateId(options.generateId ?? randomUUID);
  const busyTimeoutMs =
    options.busyTimeoutMs !== undefined
      ? requireDurationMs('busyTimeoutMs', options.busyTimeoutMs)
      : 'path' in source
        ? DEFAULT_BUSY_TIMEOUT_MS
        : undefined;
  const migrate = requireBoolean('migrate', options.migrate ?? true);
  const synchronous = options.synchronous ?? ('path' in source ? DEFAULT_SYNCHRONOUS : undefined);
  if (synchronous !== undefined && !SQLITE_SYNCHRONOUS.includes(synchronous)) throw invalidOption('synchronous', "'normal' or 'full'", synchronous);
  return Object.freeze({
    migrate,
    source: Object.freeze(source),
    table,
    clock,
    generateId,
    busyTimeoutMs,
    synchronous,
  });
}
