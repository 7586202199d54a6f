/**
 * The fenced update on PostgreSQL.
 *
 * @module
 */
import type pg from 'pg';
import { fencedUpdateStatement, type FencedUpdate } from '../../core/fenced-update.js';

/**
 * Runs `UPDATE table SET …, fence = $token WHERE id = $id AND fence < $token` through `client` (a pool, a
 * client, or the transaction a transactional receiver hands the work): the write lands only when the
 * claim's fencing token is larger than the last one that wrote the row, so a holder paused past its lease
 * (and taken over) cannot overwrite the newer holder's write. Add the column once: `ALTER TABLE t ADD
 * COLUMN fence bigint NOT NULL DEFAULT 0`. Source: Martin Kleppmann, "How to do distributed locking"
 * (2016), fencing tokens.
 *
 * @returns `true` when the row was written, `false` when it is fenced off (or absent)
 * @throws TypeError when a name is not a plain identifier or the token is not a decimal integer
 * @example
 * ```ts
 * import { fencedUpdate } from 'retrysafe/postgres';
 * const written = await fencedUpdate(pool, { table: 'accounts', id: 42, set: { balance: 900 }, fencingToken: claim.fencingToken! });
 * ```
 */
export async function fencedUpdate(client: Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>, update: FencedUpdate): Promise<boolean> {
  const { text, values } = fencedUpdateStatement(update, (n) => `$${n}`);
  const result = await client.query(text, values.map((value) => (typeof value === 'bigint' ? value.toString() : value)));
  return result.rowCount === 1;
}
