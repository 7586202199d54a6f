/**
 * Where a SQLite-backed store's connection comes from: a file it opens itself (`path`), or a
 * `better-sqlite3` connection the application hands it (`database`). The idempotency store, the SQLite
 * inbox store and the SQLite session store check the pair alike.
 *
 * @module
 */
import type { Database } from 'better-sqlite3';
import { invalidOption } from '../../core/validate.js';

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
  if (database !== undefined && path !== undefined) throw invalidOption('path', 'absent when "database" is given', path);
  if (path !== undefined && (typeof path !== 'string' || path.length === 0)) throw invalidOption('path', "a file path or ':memory:'", path);
  if (database === undefined) return { path: path ?? ':memory:' };
  if (typeof database !== 'object' || database === null || typeof (database as Partial<Database>).prepare !== 'function') {
    throw invalidOption('database', 'a better-sqlite3 Database', database);
  }
  return { database: database as Database };
}
