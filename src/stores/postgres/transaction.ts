/**
 * One transaction on a connection checked out of a `pg` pool, as the idempotency store and the PostgreSQL
 * inbox both run theirs: the connection's `error` events are caught (a connection killed while checked out
 * must not crash the process), a failed transaction is rolled back, and a connection that failed, or that
 * the caller discarded, is destroyed on release rather than handed back to the pool.
 *
 * @module
 */
import type pg from 'pg';
import { TransactionAbortedError } from '../../core/errors.js';

/**
 * Checks a client out of `pool` and runs `fn` on it; `fn` issues `BEGIN` and {@link commit} itself. When
 * `fn` rejects, the transaction is rolled back (unless the connection is broken or discarded) and the
 * rejection passes on. The client is released in every case: destroyed when its connection emitted
 * `error`, the `ROLLBACK` failed, or `fn` called `discard` (the server then rolls back whatever is open).
 *
 * @param fn - gets the client, and `discard(error)` to have the connection destroyed instead of reused
 *   (a handler past its deadline may still sit in a query on it)
 */
export async function onPoolClient<R>(pool: pg.Pool, fn: (client: pg.PoolClient, discard: (error: Error) => void) => Promise<R>): Promise<R> {
  const client = await pool.connect();
  let broken: Error | undefined;
  const discard = (error: Error): void => {
    broken ??= error;
  };
  client.on('error', discard);
  try {
    return await fn(client, discard);
  } catch (error) {
    if (broken === undefined) {
      await client.query('ROLLBACK').catch((rollbackError: unknown) => {
        broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
      });
    }
    throw error;
  } finally {
    client.removeListener('error', discard);
    client.release(broken);
  }
}

/**
 * Commits the transaction open on `client`.
 *
 * @param what - the transaction, for the message (`the transaction`, `the inbox transaction`)
 * @throws {@link TransactionAbortedError} when an earlier statement had aborted it: PostgreSQL then rolls
 *   back at COMMIT and reports ROLLBACK instead of failing
 */
export async function commit(client: pg.PoolClient, what: string): Promise<void> {
  const result = await client.query('COMMIT');
  if (result.command !== 'COMMIT') {
    throw new TransactionAbortedError(`retrysafe: ${what} was aborted by an earlier error and rolled back at COMMIT`);
  }
}
