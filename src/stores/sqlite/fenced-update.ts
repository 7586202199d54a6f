/**
 * The fenced update on SQLite.
 *
 * @module
 */
import type { Database } from 'better-sqlite3';
import { fencedUpdateStatement, type FencedUpdate } from '../../core/fenced-update.js';

/**
 * Runs `UPDATE table SET …, fence = ? WHERE id = ? AND fence < ?` on `database`: the write lands only when
 * the claim's fencing token is larger than the last one that wrote the row, so a holder paused past its
 * lease (and taken over) cannot overwrite the newer holder's write. Add the column once: `ALTER TABLE t
 * ADD COLUMN fence INTEGER NOT NULL DEFAULT 0` (a 64-bit integer; the token is bound as a BigInt). Source:
 * Martin Kleppmann, "How to do distributed locking" (2016), fencing tokens.
 *
 * @returns `true` when the row was written, `false` when it is fenced off (or absent)
 * @throws TypeError when a name is not a plain identifier or the token is not a decimal integer
 * @example
 * ```ts
 * import { fencedUpdate } from 'retrysafe/sqlite';
 * const written = fencedUpdate(database, { table: 'accounts', id: 42, set: { balance: 900 }, fencingToken: claim.fencingToken! });
 * ```
 */
export function fencedUpdate(database: Database, update: FencedUpdate): boolean {
  const { text, values } = fencedUpdateStatement(update, () => '?');
  // SQLite numbers `?` in order of appearance: the token appears twice, so it is bound twice.
  const [assignments, where] = [values.slice(0, -2), values.slice(-2)];
  return database.prepare(text).run(...assignments, where[0], where[1], where[0]).changes === 1;
}
