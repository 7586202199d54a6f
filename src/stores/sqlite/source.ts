/**
 * Where a SQLite-backed store's connection comes from: a file it opens itself (`path`), or a
 * `better-sqlite3` connection the application hands it (`database`), and the prefix its tables are named
 * by. The SQLite-backed stores check these options alike.
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

const TABLE_PREFIX = /^[A-Za-z_][A-Za-z0-9_]{0,39}$/;

/**
 * Checks the `prefix` option of a SQLite-backed store's tables (`<prefix>_<table>`).
 *
 * @returns `prefix`, else `fallback` when it is absent
 * @throws TypeError naming the option and the value when `prefix` is not letters, digits and `_` (at most
 *   40, not starting with a digit)
 */
export function requireSqlitePrefix(prefix: unknown, fallback: string): string {
  const value = prefix ?? fallback;
  if (typeof value !== 'string' || !TABLE_PREFIX.test(value)) throw invalidOption('prefix', 'letters, digits and "_" (at most 40)', value);
  return value;
}
