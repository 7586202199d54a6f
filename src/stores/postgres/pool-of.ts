/**
 * A pool of one connection over the transaction the PostgreSQL store hands a transactional handler, so a
 * query builder that wants a pool (Kysely's `PostgresDialect`) writes through that transaction.
 *
 * @module
 */
import type pg from 'pg';
import { StoreMisuseError } from '../../core/errors.js';
import { invalidOption } from '../../core/validate.js';

/** The connection {@link TransactionPool.connect} hands out: the transaction's own client, minus its release. */
export interface TransactionPoolClient {
  /** `pg`'s `query`, run on the transaction's connection; statements that would end or nest it are refused. */
  readonly query: pg.PoolClient['query'];
  /** Does nothing: the connection goes back to the pool when the store ends the transaction, not before. */
  release(): void;
}

/** A pool whose only connection is the request's transaction (the shape of Kysely's `PostgresPool`). */
export interface TransactionPool {
  /** Resolves the transaction's connection, every time. */
  connect(): Promise<TransactionPoolClient>;
  /** Does nothing: the store owns the connection and its pool. */
  end(): Promise<void>;
}

/**
 * `BEGIN`, `START TRANSACTION`, `COMMIT`, `END`, `ROLLBACK` (not `ROLLBACK TO SAVEPOINT`), `ABORT` and the
 * two-phase commands: inside the store's transaction, PostgreSQL answers a nested `BEGIN` with a mere
 * warning, and the `COMMIT` that follows would commit the business writes apart from the saved response.
 */
const TRANSACTION_CONTROL =
  /^[\s(]*(?:begin|start\s+transaction|commit|end|abort|prepare\s+transaction|rollback(?!\s+(?:work\s+|transaction\s+)?to\b))\b/i;

/**
 * Wraps the `pg` `PoolClient` of a transactional PostgreSQL receiver (`idempotencyOf(req, receiver).tx`, or
 * `context.tx` in `receiver.run`) as a pool with that one connection, for a library that runs its queries
 * on a pool. Its client's `release()` and the pool's `end()` do nothing, because the store releases the
 * connection itself after COMMIT or ROLLBACK; a library releasing it earlier would hand a connection in
 * the middle of a transaction to the next request. Statements that end or nest the transaction (`BEGIN`,
 * `COMMIT`, `ROLLBACK`, …; savepoints are fine) reject with a `StoreMisuseError`, so an ORM's own
 * `transaction()` fails loudly instead of committing part of the request on its own.
 *
 * Use the pool only while the handler runs: afterwards the connection is back in the store's pool and may
 * be serving another request.
 *
 * @param tx - the transaction handle the PostgreSQL store handed the handler
 * @returns a pool for Kysely's `new PostgresDialect({ pool })`
 * @throws TypeError when `tx` has no `query` method
 * @example
 * ```ts
 * import { Kysely, PostgresDialect } from 'kysely';
 * import { poolOf } from 'retrysafe/postgres';
 *
 * app.post('/orders', idempotency({ receiver }), async (req, res) => {
 *   const { tx } = idempotencyOf(req, receiver)!;
 *   const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool: poolOf(tx) }) });
 *   const order = await db.insertInto('orders').values({ amount: req.body.amount }).returning('id').executeTakeFirstOrThrow();
 *   res.status(201).json(order); // committed with the saved response, or rolled back with the key
 * });
 * ```
 */
export function poolOf(tx: pg.PoolClient): TransactionPool {
  if (typeof tx !== 'object' || tx === null || typeof (tx as Partial<pg.PoolClient>).query !== 'function') {
    throw invalidOption('tx', 'the pg PoolClient of a transactional handler', tx, 'poolOf');
  }
  const query = (...args: unknown[]): unknown => {
    const statement = args[0];
    const text = typeof statement === 'string' ? statement : (statement as { text?: unknown } | null | undefined)?.text;
    if (typeof text === 'string' && TRANSACTION_CONTROL.test(text)) {
      return Promise.reject(
        new StoreMisuseError(
          `retrysafe: ${JSON.stringify(text.trim().split(/\s+/, 2).join(' '))} refused: the request's transaction is opened and ended by the store (use a SAVEPOINT for a nested unit)`,
        ),
      );
    }
    return (tx as unknown as { query(...params: unknown[]): unknown }).query(...args);
  };
  const client: TransactionPoolClient = Object.freeze({ query: query as pg.PoolClient['query'], release: noop });
  return Object.freeze({ connect: () => Promise.resolve(client), end: () => Promise.resolve() });
}

function noop(): void {}
