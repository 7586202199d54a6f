/**
 * Migration 0008: drops `require_empty_transaction()`, the guard of the claim that once ran inside a
 * business transaction (a batch that committed the empty transaction, claimed, and began again). Every
 * claim now runs on its own, before the business transaction opens, so nothing calls the guard.
 *
 * Append-only: once released, this text never changes.
 *
 * `IF EXISTS` keeps the migration safe on a schema where an operator already removed the function by hand.
 * A process still running code from before this migration fails its transactional phase claims ("function
 * does not exist") until it is restarted with the new code.
 *
 * @module
 */

/** The migration's SQL for the schema `s` (an already quoted identifier). */
export function sql(s: string): string {
  return `
DROP FUNCTION IF EXISTS ${s}.require_empty_transaction();
`;
}
