/**
 * Where the PostgreSQL store and `migrate` get their connections: a `pg.Pool` the application hands them
 * (`pool`), or a `connectionString` they connect with themselves. Both check the pair alike.
 *
 * @module
 */
import type pg from 'pg';
import { invalidOption, requireExactlyOne, requireNonEmptyString } from '../../core/validate.js';

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
  requireExactlyOne(factory, 'pool', pool, 'connectionString', connectionString);
  if (pool === undefined) return { connectionString: requireNonEmptyString('connectionString', connectionString) };
  if (typeof pool !== 'object' || pool === null || typeof (pool as Partial<pg.Pool>).connect !== 'function') throw invalidOption('pool', 'a pg.Pool', pool);
  return { pool: pool as pg.Pool };
}
