/**
 * What a PostgreSQL migration is. Each module keeps its numbered migrations next to its code and lists
 * them as {@link Migration}s; `migrations/index.ts` gathers every module's list into the one sequence that
 * `migrate()` applies and records in the one ledger, `<schema>.schema_migrations`.
 *
 * @module
 */

/** One numbered migration. */
export interface Migration {
  /**
   * Position in the one sequence every module shares, from 1: the ledger's primary key. A number is never
   * reused, whichever module took it.
   */
  readonly version: number;
  /**
   * The file's name without extension: the version in four digits, `_`, what it does (e.g. `0001_init`).
   * Recorded in the ledger for people reading it.
   */
  readonly name: string;
  /** The SQL for a schema, given as an already quoted identifier. May hold several statements. */
  readonly sql: (quotedSchema: string) => string;
}
