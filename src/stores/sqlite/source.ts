/**
 * Where a SQLite-backed store's connection comes from: a file it opens itself (`path`), or a
 * `better-sqlite3` connection the application hands it (`database`). The idempotency store, the SQLite
 * inbox store and the SQLite session store check the pair alike.
 *
 * @module
 */
import type { Database } from 'better-sqlite3';
import { describe } from '../../core/validate.js';

/** The connection a store opens itself (`path`), or the one it is given (`database`). */
export type SqliteSource = { readonly path: string } | { readonly database: Database };

/**
 * Checks the `path` and `database` options of a SQLite-backed store.
 *
 * @returns the given `database`, else `path` (`':memory:'` when neither is given)
 * @throws TypeError naming the option and the value when both are given, when `path` is not a non-empty
 *   string, or when `database` is not a `better-sqlite3` connection
 */
export function requireSqliteSource(path: unknown, database: unknown): SqliteSource {
  if (database !== undefined && path !== undefined) {
    throw new TypeError(`retrysafe: option "path" (${describe(path)}) must be absent when "database" is given`);
  }
  if (path !== undefined && (typeof path !== 'string' || path.length === 0)) {
    throw new TypeError(`retrysafe: option "path" must be a file path or ':memory:', got ${describe(path)}`);
  }
  if (database === undefined) return { path: path ?? ':memory:' };
  if (typeof database !== 'object' || database === null || typeof (database as Partial<Database>).prepare !== 'function') {
    throw new TypeError(`retrysafe: option "database" must be a better-sqlite3 Database, got ${describe(database)}`);
  }
  return { database: database as Database };
}
