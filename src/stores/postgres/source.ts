/**
 * Where the PostgreSQL store and `migrate` get their connections: a `pg.Pool` the application hands them
 * (`pool`), or a `connectionString` they connect with themselves. Both check the pair alike.
 *
 * @module
 */
import type pg from 'pg';
import { describe } from '../../core/validate.js';

/** The pool given (`pool`), or the connection string to connect with (`connectionString`). */
type PostgresSource = { readonly pool: pg.Pool } | { readonly connectionString: string };

/**
 * Checks the `pool` and `connectionString` options of `factory`.
 *
 * @param factory - the function the options were given to, named in the messages (`createPostgresStore`, `migrate`)
 * @throws TypeError when both or neither are given, when `pool` is not a `pg.Pool`, or when
 *   `connectionString` is not a non-empty string
 */
export function requirePostgresSource(factory: string, pool: unknown, connectionString: unknown): PostgresSource {
  if ((pool === undefined) === (connectionString === undefined)) {
    throw new TypeError(`retrysafe: ${factory} needs exactly one of the options "pool" and "connectionString"`);
  }
  if (pool !== undefined) {
    if (typeof pool !== 'object' || pool === null || typeof (pool as Partial<pg.Pool>).connect !== 'function') {
      throw new TypeError(`retrysafe: option "pool" must be a pg.Pool, got ${describe(pool)}`);
    }
    return { pool: pool as pg.Pool };
  }
  if (typeof connectionString !== 'string' || connectionString === '') {
    throw new TypeError(`retrysafe: option "connectionString" must be a non-empty string, got ${describe(connectionString)}`);
  }
  return { connectionString };
}
