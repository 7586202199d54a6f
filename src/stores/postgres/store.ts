/**
 * The PostgreSQL store's public face: its options, the {@link PostgresStore} interface and
 * {@link createPostgresStore}, which validates the options and builds the store (`postgres-store.ts`).
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Clock } from '../../core/clock.js';
import { invalidOption, requireBoolean, requireClock, requireGenerateId, requireOneOf, requireOptions } from '../../core/validate.js';
import type { Claim, IdempotencyRecord } from '../../core/record.js';
import type { ClaimedTransaction, ClaimInput, RecordQuery, TransactionalStore, TransactionBounds, TransactionView } from '../../core/store.js';
import { isListenOption } from './listen-session.js';
// The class shares the interface's name, so it is reached through its module.
import * as postgresStore from './postgres-store.js';
import { requirePostgresSource } from './source.js';
import { DEFAULT_SCHEMA, schemaNames } from './schema.js';

/** Options of {@link createPostgresStore}: exactly one of `pool` and `connectionString`. */
export interface PostgresStoreOptions {
  /**
   * The pool to run on. The store never ends it (`close` leaves it to its owner). The `waitFor` listener
   * opens one extra dedicated connection with the pool's settings.
   */
  readonly pool?: pg.Pool;
  /** A PostgreSQL URL; the store then owns a pool of its own and ends it on `close`. */
  readonly connectionString?: string;
  /**
   * The schema holding the records table, as created by `migrate()` (`migrate.ts`). Letters, digits and `_`, at most
   * 48 characters; always quoted. @defaultValue 'retrysafe'
   */
  readonly schema?: string;
  /**
   * Replaces the database server's clock with this one (milliseconds since the epoch, passed into every
   * statement). For tests on a fake clock, or a single process: with it, leases and retention depend on
   * this process's clock again, and a process whose clock runs ahead takes over live leases of others.
   * @defaultValue none: "now" is the server's `clock_timestamp()`, read inside each statement, so
   * processes sharing the store need no clock sync
   */
  readonly clock?: Clock;
  /** Fencing-token generator. @defaultValue `crypto.randomUUID` */
  readonly generateId?: () => string;
  /**
   * Whether the per-request statements (claim and its `claim()` step, complete, release, get, checkpoint) run as named prepared
   * statements: parsed once per connection and planned once, instead of on every execution, which saves
   * PostgreSQL a parse and a plan per request (the effect on throughput is in docs/benchmarks.md). Turn it off behind a pooler that cannot keep
   * prepared statements across transactions: PgBouncer in transaction mode before 1.21, or without
   * `max_prepared_statements`; and off if anything runs `DISCARD ALL` or `DEALLOCATE` on the pool's
   * connections behind the driver's back (the driver would then execute statements the session no longer
   * has). PostgreSQL re-plans a prepared statement when a migration changes the
   * tables or functions under it; a migration that changes the claim function's result columns (as 0004
   * did) fails statements prepared before it with "cached plan must not change result type" until the
   * connection is replaced, so restart the services after such a migration (they run code that expects
   * the new columns anyway). @defaultValue true
   */
  readonly preparedStatements?: boolean;
  /**
   * The connection `waitFor` (the engine's `inFlight: 'wait'`) LISTENs on for completions: a `pg.ClientConfig`
   * (e.g. `{ connectionString }`) for a session straight to PostgreSQL, or `false` for no LISTEN at all:
   * `waitFor` then reads the record every `WAIT_POLL_MS` (100) milliseconds until it is completed or gone.
   * Behind PgBouncer in transaction mode the pool's own settings cannot work (a LISTEN through the pooler
   * never hears a notification), and `waitFor` rejects with an error naming this option; every other
   * operation runs through the pooler as usual.
   * @defaultValue a dedicated connection with the pool's settings, opened on the first `waitFor`
   */
  readonly listen?: pg.ClientConfig | false;
  /**
   * Where transactional mode (`claimTransaction`) claims a key:
   * - `'apart'`: committed on its own before the business transaction, then completed in it: two durable
   *   commits per new key; an in-flight record is visible (console, `listRecords`) with its lease, kept
   *   alive while the handler runs, and a crashed holder's record is taken over once its lease ends.
   * - `'locked'`: inside the business transaction, as a transaction-scoped advisory lock on the key
   *   (`pg_try_advisory_xact_lock`, which works behind PgBouncer in transaction mode), the record inserted
   *   completed with the business rows: one durable commit per new key. Nothing of an in-flight key is
   *   visible (no record, no lease, not in `listRecords` or the console) until it commits; a crash or a
   *   rollback leaves nothing behind, so a retry claims afresh (`takeover: false`). A duplicate of an
   *   in-flight key is answered 409 whatever its fingerprint (the holder's is not visible yet; 422 once it
   *   commits). A `wait`-mode duplicate waits on a pooled connection for the key's lock, and a held
   *   transaction ends by `maxExecutionMs`: nothing can take it over before. An atomic phase inserts the
   *   record at its first checkpoint, and runs as with `'apart'` from then on; a record to take over
   *   (an expired lease or retention) is claimed apart.
   * @defaultValue 'apart'
   */
  readonly transactionalClaim?: 'apart' | 'locked';
}

/** A PostgreSQL idempotency store; transactions hand out the `pg` `PoolClient` they run on. */
export interface PostgresStore extends TransactionalStore<pg.PoolClient> {
  /** The schema name in use (unquoted). */
  readonly schema: string;
  /** The pool the store runs on (its own when created from a `connectionString`). */
  readonly pool: pg.Pool;
  /**
   * Resolves with the record once (scope, key) is completed or gone, woken by NOTIFY on the schema's
   * channel (delivered at COMMIT), or with the record as it stands after `timeoutMs` milliseconds. It
   * first flags the record as awaited (one UPDATE), since completions notify only flagged records.
   * Rejects with a `StoreClosedError` after `close()`.
   */
  waitFor(scope: string, key: string, timeoutMs: number): Promise<IdempotencyRecord | undefined>;
  /**
   * Records a recovery point and renews the lease in one fenced UPDATE; inside a transaction, the view's
   * `checkpoint` runs on the transaction's connection and commits with the phase's writes. See
   * {@link IdempotencyStore.checkpoint}.
   */
  checkpoint(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined>;
  /**
   * Abandoned multi-phase records, oldest lease end first, in one bounded SELECT over the partial index
   * `records_abandoned_idx`. See {@link IdempotencyStore.listAbandoned}.
   */
  listAbandoned(limit: number): Promise<IdempotencyRecord[]>;
  /**
   * Claims on its own, then runs `fn` in a transaction that ends no later than the claim's lease
   * (`input.leaseMs` milliseconds from the won claim). The server bounds it (`SET LOCAL statement_timeout`
   * and `idle_in_transaction_session_timeout` to the time left, sent with `BEGIN` in one round trip), and
   * when the lease ends with `fn` still running the store does not wait for it: the connection is
   * destroyed, never handed back to the pool, its backend ended (`pg_terminate_backend`, from a pooled
   * connection; the role must be the same or hold `pg_signal_backend`), which rolls the transaction back at
   * once, and the promise rejects with a `LeaseLostError` (HTTP 409). A late statement of `fn` then fails.
   *
   * With `bounds` (the engine passes its `maxExecutionMs`), the lease is kept alive while `fn` runs: a
   * fenced `renew` on the pool every third of `input.leaseMs`, each moving the transaction's end to
   * `input.leaseMs` after it, never past `bounds.maxExecutionMs` from the won claim, which is also what
   * the server's bounds are set to. A renewal fenced off ends the transaction at once (`LeaseLostError`,
   * reason `taken_over`); reaching `maxExecutionMs` ends it with reason `deadline`.
   *
   * When the transaction cannot start (no pooled connection within the pool's `connectionTimeoutMillis`,
   * or `BEGIN` fails) the won claim is released (fenced) before the error passes on, so a retry runs at
   * once instead of a lease later; when the pooled connection arrives after the lease or the bound ended,
   * `fn` is not run, the claim is released and the promise rejects with a `LeaseLostError`.
   *
   * With `transactionalClaim: 'locked'` the claim is made inside the transaction instead
   * (`locked-claim.ts`): the key's advisory lock with `BEGIN`, the record read after it, and the record
   * inserted by the view's first `complete` (or `checkpoint`), so there is no lease to renew and the
   * transaction ends by `bounds.maxExecutionMs` (reason `deadline`), the server bounding it the same way;
   * a replay or a 409 then costs a transaction that rolls back (`BEGIN`, the read, `ROLLBACK`).
   * See {@link TransactionalStore.claimTransaction}.
   */
  claimTransaction<R>(
    input: ClaimInput,
    fn: (tx: pg.PoolClient, store: TransactionView, claim: Claim) => Promise<R>,
    bounds?: TransactionBounds,
  ): Promise<ClaimedTransaction<R>>;
  /** One page of records in (scope, key) order, one SELECT bounded by `LIMIT`; see {@link IdempotencyStore.listRecords}. */
  listRecords(query: RecordQuery): Promise<IdempotencyRecord[]>;
}

/**
 * Creates a PostgreSQL {@link TransactionalStore} (PostgreSQL 13 or later). Run `migrate()` on the
 * schema first.
 *
 * Operations (each one statement, one round trip, but for the claim's rarer cases; prepared once per connection unless
 * `preparedStatements` is false; see `statements.ts`):
 * - `claim` (`claim.ts`) is one plain statement for a new key (read by primary key, then insert) and for a
 *   record that stands (returned as read: a replay reads and locks nothing); taking over an expired lease
 *   (same fingerprint) or an expired record (any fingerprint), the owner's own claim again and a lost race
 *   go on to the schema's `claim()` function in a second round trip.
 * - `complete` / `release` are fenced by the lease token. When a `waitFor` has flagged the record, they
 *   NOTIFY the schema's channel, which wakes it (LISTEN/NOTIFY), so a `wait`-mode duplicate gets the
 *   original's response without polling. Unflagged records complete without NOTIFY, whose commit-time
 *   lock would otherwise queue every completion's commit behind the others (migration 0006).
 * - `reap(limit)` deletes at most `limit` expired rows per call with `FOR UPDATE SKIP LOCKED`: it never
 *   waits on a row another transaction holds, and each call is its own short transaction.
 * - `checkpoint` (atomic phases) is one UPDATE fenced by the lease token: it records the recovery point,
 *   renews the lease and stretches the retention to cover it; a takeover `claim` hands the recovery point
 *   to the new holder (migration 0004).
 * - `listAbandoned(limit)` is one SELECT bounded by `limit`, served by a partial index of in-progress rows
 *   that have a recovery point, oldest lease end first.
 * - Time: every lease, retention and takeover decision (claim, complete, checkpoint, reap, listAbandoned)
 *   reads the server's `clock_timestamp()` inside the statement (see `SERVER_NOW_MS` in `statement.ts`),
 *   so processes sharing the database need no clock sync; records carry the server's milliseconds.
 *
 * Transactional mode (`claimTransaction`), following Brandur Leach's "Implementing Stripe-like Idempotency
 * Keys in Postgres", with the default `transactionalClaim: 'apart'` (the option describes `'locked'`): the claim is committed on its own, before the business transaction (`claim.ts`), so a
 * concurrent duplicate sees the in-progress record at once and is answered 409 without waiting on a row
 * lock (an `INSERT … ON CONFLICT` inside an open transaction would block on the other transaction's
 * uncommitted row until it ends). Only a won claim opens the transaction: a replay, a 409 or a 422 costs
 * one round trip and no transaction, and the claim's connection is back in the pool before the transaction
 * takes one, so a busy pool cannot deadlock. The business writes and the fenced `complete` (or an atomic
 * phase's `checkpoint`) then commit together; the response is sent after COMMIT. If the transaction rolls
 * back, the committed claim is left behind and the caller releases it; if the process dies, the claim's
 * lease expires and a retry takes over — the business writes never committed, so the effect still lands
 * once. The transaction never outlives the claim's lease: see {@link PostgresStore.claimTransaction}, so a
hung handler cannot pin the server's snapshot xmin (which the outbox relay and vacuum wait behind) or hold
a pooled connection past it. Isolation is READ COMMITTED, set explicitly: the fenced `complete` re-checks its WHERE against the
 * newest committed row, so a takeover that committed meanwhile fences it cleanly where a stricter level
 * would raise a serialization failure.
 *
 * Errors: methods reject with the driver's error when PostgreSQL fails (the engine answers 503).
 * `transaction` rejects with a `TransactionAbortedError` when a statement in it failed and `fn` swallowed
 * the error, since PostgreSQL then rolls the transaction back at COMMIT. A claim
 * running under a server default stricter than READ COMMITTED may fail a race with a serialization error
 * (SQLSTATE 40001) instead of losing it quietly. Keys and scopes cannot contain NUL (a PostgreSQL `text` limit).
 *
 * @throws TypeError naming the option when an option is invalid (neither or both of `pool` and
 *   `connectionString`, a bad `schema`, a `clock` without `now()`, a non-function `generateId`, a
 *   non-boolean `preparedStatements`, a `transactionalClaim` other than `'apart'` and `'locked'`)
 * @example
 * ```ts
 * import pg from 'pg';
 * import { createReceiver } from 'retrysafe';
 * import { createPostgresStore, migrate } from 'retrysafe/postgres';
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * await migrate({ pool });
 * const store = createPostgresStore({ pool });
 * const receiver = createReceiver({ store, transactional: true });
 * const result = await receiver.run(id, async ({ tx }) => {
 *   await tx.query('INSERT INTO payments (id, amount) VALUES ($1, $2)', [id.key, 100]);
 *   return { ok: true };
 * });
 * ```
 */
export function createPostgresStore(options: PostgresStoreOptions): PostgresStore {
  requireOptions('createPostgresStore', options);
  const names = schemaNames('schema', options.schema ?? DEFAULT_SCHEMA);
  const source = requirePostgresSource('createPostgresStore', options.pool, options.connectionString);
  const clock = options.clock === undefined ? undefined : requireClock(options.clock);
  const generateId = requireGenerateId(options.generateId ?? randomUUID);
  const prepared = requireBoolean('preparedStatements', options.preparedStatements ?? true);
  if (!isListenOption(options.listen)) throw invalidOption('listen', 'a pg.ClientConfig or false', options.listen);
  const transactionalClaim = requireOneOf('transactionalClaim', options.transactionalClaim ?? 'apart', ['apart', 'locked']);
  if ('pool' in source) return new postgresStore.PostgresStore(source.pool, false, names, clock, generateId, prepared, options.listen, transactionalClaim);
  const ownedPool = new pg.Pool({ connectionString: source.connectionString });
  // An idle pooled connection that dies (server restart, pg_terminate_backend) is dropped by the pool;
  // without a listener its 'error' event would crash the process.
  ownedPool.on('error', () => undefined);
  return new postgresStore.PostgresStore(ownedPool, true, names, clock, generateId, prepared, options.listen, transactionalClaim);
}

