/**
 * What a PostgreSQL migration is. Each module keeps its numbered migrations next to its code and lists
 * them as {@link Migration}s; `src/migrate.ts` gathers every module's list with {@link sequence} into the
 * one sequence that `migrate()` applies and records in the one ledger, `<schema>.schema_migrations`.
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

/**
 * Every module's migrations in one list ordered by number.
 *
 * @throws Error (when this module loads) unless the numbers run 1, 2, 3 … without a gap or a number taken
 *   twice, and each name starts with its number in four digits
 */
export function sequence(...lists: (readonly Migration[])[]): readonly Migration[] {
  const all = lists.flat().sort((a, b) => a.version - b.version);
  all.forEach((migration, at) => {
    if (migration.version !== at + 1 || !migration.name.startsWith(`${String(migration.version).padStart(4, '0')}_`)) {
      throw new Error(
        `retrysafe: PostgreSQL migration ${migration.name} (version ${migration.version}) is out of sequence: expected version ${at + 1}, named after it`,
      );
    }
  });
  return Object.freeze(all.map((migration) => Object.freeze({ ...migration })));
}
