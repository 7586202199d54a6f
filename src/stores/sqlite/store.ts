/**
 * The SQLite store's public face: the {@link SqliteStore} interface and {@link createSqliteStore}, which
 * validates the options, opens and migrates the file and builds the store (`sqlite-store.ts`).
 *
 * @module
 */
import type { Database } from 'better-sqlite3';
import type { Claim, IdempotencyRecord } from '../../core/record.js';
import type { ClaimedTransaction, ClaimInput, RecordQuery, TransactionalStore, TransactionBounds, TransactionView } from '../../core/store.js';
import { prepareClaim } from './claim.js';
import { recordsSchema } from './migrations.js';
import { openSqlite } from './open.js';
import { resolveSqliteStoreOptions, type SqliteStoreOptions } from './options.js';
// The class shares the interface's name, so it is reached through its module.
import * as sqliteStore from './sqlite-store.js';
import { prepareStatements } from './statements.js';

/** A {@link TransactionalStore} over a `better-sqlite3` connection. */
export interface SqliteStore extends TransactionalStore<Database> {
  /** The connection the store uses; in transactional mode the business code writes through it. */
  readonly database: Database;
  /**
   * Resolves with the record once (scope, key) is completed or gone, or as it stands after `timeoutMs`
   * milliseconds. Wakes at once on a completion or release by this store (after COMMIT in transactional
   * mode) and polls every 50 ms for other processes on the same file. Its first read, like every
   * operation, queues behind a transaction open in this store; once it has read, the timeout holds.
   */
  waitFor(scope: string, key: string, timeoutMs: number): Promise<IdempotencyRecord | undefined>;
  /**
   * Runs `fn(database, view)` under `BEGIN IMMEDIATE`; COMMITs when `fn` resolves, ROLLBACKs when it
   * rejects, and settles only after that. Every other operation of this store, and every other
   * transaction, waits in FIFO order until then, so none lands inside this one. Inside `fn`, use `view`
   * (its complete, release and checkpoint run in the transaction; completions wake waiters only after
   * COMMIT); calling the store itself from inside `fn` rejects with a `StoreMisuseError` instead of
   * deadlocking, and so does the view once the transaction has ended. After `close()`, every operation
   * rejects with a `StoreClosedError`.
   */
  transaction<R>(fn: (tx: Database, store: TransactionView) => Promise<R>): Promise<R>;
  /**
   * Claims inside the transaction it then runs `fn` in (as {@link SqliteStore.transaction}): the claim,
   * the business writes and the saved response commit together, so a crash before COMMIT leaves no record
   * and no row, and a retry runs at once. A duplicate in this process queues behind the transaction and
   * then replays; one in another process waits on the file's write lock up to `busyTimeoutMs`.
   *
   * The transaction never outlives `bounds.maxExecutionMs` milliseconds from the claim (without `bounds`,
   * the claim's lease, `input.leaseMs`); no lease needs keeping alive, since no one sees the claim before
   * COMMIT. When the bound ends with `fn` still pending, the store rolls back without waiting for `fn`, frees the
   * connection for the next operation and rejects with a `LeaseLostError` (HTTP 409; reason `deadline`
   * with `bounds`). `fn` gets a guarded
   * handle on the connection (`tx`; its statements and transaction functions too) and a view, which both
   * throw a `StoreMisuseError` from then on, so a late write can neither commit on its own nor land in
   * another request's transaction. Only a handler that awaits can be stopped: one that blocks the event
   * loop (a synchronous loop) holds the connection until it yields.
   */
  claimTransaction<R>(
    input: ClaimInput,
    fn: (tx: Database, store: TransactionView, claim: Claim) => Promise<R>,
    bounds?: TransactionBounds,
  ): Promise<ClaimedTransaction<R>>;
  /** Records a recovery point and renews the lease, fenced; see {@link TransactionalStore.checkpoint}. */
  checkpoint(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined>;
  /** Abandoned multi-phase records, served by a partial index; see {@link TransactionalStore.listAbandoned}. */
  listAbandoned(limit: number): Promise<IdempotencyRecord[]>;
  /** One page of records in (scope, key) order, bounded by `LIMIT`; see {@link IdempotencyStore.listRecords}. */
  listRecords(query: RecordQuery): Promise<IdempotencyRecord[]>;
}

/**
 * Creates the SQLite store. Opens (or adopts) the connection, sets WAL journal mode on an opened file,
 * `busy_timeout` and `synchronous` (`'normal'` unless the `synchronous` option says `'full'`: see
 * {@link SqliteStoreOptions.synchronous} for what each survives), and creates or upgrades the schema
 * idempotently (unless `migrate: false`, which opens an existing, migrated file and creates nothing).
 *
 * Concurrency: every operation runs through one FIFO mutex, because while a {@link SqliteStore.transaction}
 * awaits its callback the single connection is inside that transaction (an idle store, with no transaction
 * open and nothing queued, runs a statement at once). A claim is decided by SQL under the file's write lock
 * (`claim.ts`), so processes sharing the file get exactly one winner too. While several requests are in
 * flight in this process, their writes (claims that found no record standing, completions, releases) are
 * gathered until the event loop's check phase and committed together in one `BEGIN IMMEDIATE` transaction
 * (`group-commit.ts`): one commit's WAL frames and file locks instead of one per write, each write still
 * atomic and answered only after that COMMIT, a replay still answered from a read without the write lock
 * (unless a group is gathering, which it then joins, keeping calls in order). `waitFor` wakes at once on a
 * completion or release in this process and polls every 50 ms for other processes. A transaction holds the
 * file's write lock until it ends: another process's writes wait for it up to `busyTimeoutMs` (blocking
 * that process's event loop, as the driver is synchronous) and then fail with `SQLITE_BUSY`, which the
 * engine answers as `StoreUnavailableError` (503); keep transactional handlers short.
 *
 * @throws TypeError naming the option when an option is invalid (see {@link SqliteStoreOptions})
 * @throws the driver's error when the file cannot be opened or migrated (with `migrate: false`: when the file
 *   does not exist)
 * @throws Error naming the table when `migrate: false` and the record table does not exist
 * @example
 * ```ts
 * import { createReceiver } from 'retrysafe';
 * import { createSqliteStore } from 'retrysafe/sqlite';
 *
 * const store = createSqliteStore({ path: './idempotency.db' });
 * const receiver = createReceiver({ store, transactional: true });
 * const execution = await receiver.execute(id, async ({ tx }) => {
 *   tx.prepare('INSERT INTO payments (id, amount) VALUES (?, ?)').run(paymentId, 100);
 *   return { status: 201, headers: { 'content-type': 'application/json' }, body: new TextEncoder().encode('{"ok":true}') };
 * });
 * ```
 */
export function createSqliteStore(options?: SqliteStoreOptions): SqliteStore {
  const resolved = resolveSqliteStoreOptions(options);
  const { source, busyTimeoutMs, synchronous, migrate, table, clock } = resolved;
  return openSqlite({ source, busyTimeoutMs, synchronous, migrate, schema: recordsSchema(table), clock }, (database, owned) => {
    const sql = prepareStatements(database, table);
    return new sqliteStore.SqliteStore(database, owned, sql, prepareClaim(database, table, sql), clock, resolved.generateId);
  });
}
