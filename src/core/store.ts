/**
 * The store contract. Every store (memory, SQLite, PostgreSQL, Redis) implements it and passes the same
 * shared suite, `test/stores/contract.ts`.
 *
 * @module
 */
import type { Claim, IdempotencyRecord, RecordState, StoredResponse } from './record.js';

/**
 * A bounded page of records for an operator's view (`listRecords`), in (scope, key) order. Every field but
 * `limit` narrows the page; `after` is the last (scope, key) of the previous page (keyset paging).
 */
export interface RecordQuery {
  /** Only records in this state. */
  readonly state?: RecordState;
  /** Only records of exactly this scope. */
  readonly scope?: string;
  /** Only keys that start with this text (case-sensitive). */
  readonly keyPrefix?: string;
  /** Only records after this (scope, key), for the next page. */
  readonly after?: { readonly scope: string; readonly key: string };
  /** At most this many records (a positive integer). */
  readonly limit: number;
}

/** What `claim` is asked to do. Durations are in milliseconds. */
export interface ClaimInput {
  readonly scope: string;
  readonly key: string;
  /** Fingerprint of the claiming request (hex SHA-256). */
  readonly fingerprint: string;
  /** How long the winner holds the lease before another caller may take the record over. */
  readonly leaseMs: number;
  /** Retention of the record from now; replaced by `complete`'s own retention on completion. */
  readonly retentionMs: number;
  /**
   * The claimant's owner token, used as the lease (fencing) token of the claim it wins; must be unique per
   * claim attempt (a random UUID). Presenting it again after an indeterminate failure (the connection
   * dropped after the claim committed, before its reply arrived) is answered `acquired` with the standing
   * lease unchanged when the record is still in progress under that token and fingerprint: the claim is
   * idempotent for its owner instead of answering it "in progress". @defaultValue a token the store
   * generates (the claim cannot then be recognised on a retry)
   */
  readonly leaseToken?: string | undefined;
}

/**
 * The claim input of the operation `id` under `lease` (its `leaseMs` and `retentionMs`), presenting
 * `leaseToken` as the owner token; without one the store generates it. The receiver and the phase runner
 * both claim through it.
 */
export function claimInputOf(
  id: Pick<ClaimInput, 'scope' | 'key' | 'fingerprint'>,
  lease: Pick<ClaimInput, 'leaseMs' | 'retentionMs'>,
  leaseToken?: string,
): ClaimInput {
  return { scope: id.scope, key: id.key, fingerprint: id.fingerprint, leaseMs: lease.leaseMs, retentionMs: lease.retentionMs, leaseToken };
}

/**
 * The answer to a claim: either the caller won the lease (`acquired: true`) or the record that stands in
 * its way (`acquired: false`) — completed, in progress under a live lease, or carrying another fingerprint.
 */
export type ClaimResult =
  | { readonly acquired: true; readonly claim: Claim }
  | { readonly acquired: false; readonly record: IdempotencyRecord };

/**
 * An idempotency store.
 *
 * Semantics every implementation guarantees (checked by the contract suite):
 * - `claim` is ONE atomic operation: it inserts an `in_progress` record when none exists, or takes the
 *   record over when its retention expired (any fingerprint: the key is new again) or when it is
 *   `in_progress` with an expired lease and the same fingerprint (a crashed holder). Otherwise it returns
 *   the existing record unchanged. N parallel claims of one key yield exactly one winner.
 * - `complete` and `release` are fenced: they apply only while the record is `in_progress` under the
 *   caller's lease token, and report whether they did.
 * - `reap` deletes at most `limit` records whose retention has expired (never one under a live lease).
 *
 * Errors: any method rejects with the driver's error when the backend fails; the engine turns that into
 * {@link StoreUnavailableError}.
 */
export interface IdempotencyStore {
  /** Claims (scope, key) for the caller; see the interface notes for the exact rules. */
  claim(input: ClaimInput): Promise<ClaimResult>;
  /**
   * Saves the response and marks the record `completed`, keeping it for `retentionMs` milliseconds from
   * now. Resolves `false` (and changes nothing) when the caller's lease token is no longer current.
   * Idempotent for its own token: when the record is already `completed` under `claim.leaseToken` (this
   * completion ran before and its reply was lost), it resolves `true` and changes nothing, so the engine
   * can retry a completion that failed with a store error.
   */
  complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean>;
  /**
   * Fenced lease keep-alive: while the record is `in_progress` under `claim.leaseToken`, its lease ends
   * `leaseMs` milliseconds from now by the store's clock (PostgreSQL's `clock_timestamp()`, Redis's
   * `TIME`, or the injected clock), keeping the token and the recovery point; the retention is stretched,
   * never shortened, to cover the new lease. One statement or script. The engine calls it every third of
   * the lease while the work runs, so only a holder that stopped (crashed, frozen, cut off) loses its lease.
   *
   * @returns the renewed claim (same token, new `leaseExpiresAt`), or `undefined` when fenced off (the
   *   lease was taken over, or the record was completed, released or reaped)
   * @throws TypeError (as a rejection) when `leaseMs` is not a positive safe integer
   */
  renew(claim: Claim, leaseMs: number): Promise<Claim | undefined>;
  /** Deletes the caller's `in_progress` record so a retry runs again. Resolves `false` when fenced off. */
  release(claim: Claim): Promise<boolean>;
  /** The record for (scope, key), or `undefined`; an expired record may still be returned until reaped. */
  get(scope: string, key: string): Promise<IdempotencyRecord | undefined>;
  /** Deletes up to `limit` expired records; resolves how many it deleted. */
  reap(limit: number): Promise<number>;
  /** Releases the store's resources (connections, timers). */
  close(): Promise<void>;
  /**
   * Optional: the backend's name (`memory`, `sqlite`, `postgres`, `redis`), reported as the `store`
   * attribute of the receiver's metrics and in health reports; a store without one reports `custom`.
   */
  readonly kind?: string;
  /**
   * Optional (health checks): resolves once the backend answered one trivial round trip (`SELECT 1`,
   * `PING`); rejects with the driver's error when it cannot be reached or the store is closed.
   */
  ping?(): Promise<void>;
  /**
   * Optional (health checks): how many `in_progress` records have a lease that has expired — keys whose
   * holder crashed or outran its lease and that no retry has taken over yet — counting at most `limit`
   * (one bounded query). Times by the store's clock, as for `claim`.
   *
   * @throws TypeError (as a rejection) when `limit` is not a positive safe integer
   */
  countExpiredLeases?(limit: number): Promise<number>;
  /**
   * Optional: resolves with the record once (scope, key) is completed or gone, or with the record as it
   * stands after `timeoutMs` milliseconds (`undefined` when absent). Lets a concurrent duplicate wait for
   * the original's response without polling.
   */
  waitFor?(scope: string, key: string, timeoutMs: number): Promise<IdempotencyRecord | undefined>;
  /**
   * Optional (atomic phases, `createPhaseRunner`): records that the caller's multi-phase operation reached
   * `recoveryPoint` and renews its lease to `leaseMs` milliseconds from now, keeping the lease token. Fenced
   * like `complete`: applies only while the record is `in_progress` under the caller's lease token. The
   * record's retention is extended, if needed, to cover the new lease. `leaseMs` is a non-negative integer;
   * `0` ends the lease at once, handing the record (with its recovery point) to the next claim, which takes
   * it over and resumes. Through a {@link TransactionView} it commits or rolls back with the transaction. Source: Brandur Leach, "Implementing Stripe-like Idempotency Keys in Postgres" (recovery points).
   *
   * @returns the renewed claim (same token, new `leaseExpiresAt`, `recoveryPoint` set), or `undefined` when
   *   fenced off (the lease was taken over, or the record was completed, released or reaped)
   * @throws TypeError (as a rejection) when `leaseMs` is not a non-negative safe integer
   */
  checkpoint?(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined>;
  /**
   * Optional (the completer, `completeAbandoned`): up to `limit` abandoned multi-phase records — `in_progress`,
   * lease expired, a recovery point set, retention not yet expired — oldest lease expiry first. Read-only;
   * a caller still has to `claim` one (a takeover) before resuming it.
   *
   * @throws TypeError (as a rejection) when `limit` is not a positive safe integer
   */
  listAbandoned?(limit: number): Promise<IdempotencyRecord[]>;
  /**
   * Optional (the operator console): one page of records matching `query`, in (scope, key) order.
   * Read-only and bounded: at most `query.limit` records, whatever the table holds.
   *
   * @throws TypeError (as a rejection) when `query.limit` is not a positive safe integer
   */
  listRecords?(query: RecordQuery): Promise<IdempotencyRecord[]>;
  /**
   * Optional (batches, `Receiver.runBatch`): claims every input in as few round trips as the backend allows
   * (memory: a loop; SQLite: one transaction; PostgreSQL: one statement over arrays; Redis: one script call
   * per hash slot), each by the rules of {@link IdempotencyStore.claim}, and resolves one result per input
   * in input order. The inputs name distinct (scope, key) pairs. A store without it is claimed one input
   * at a time (`claimAll` in `core/batch-claim.ts`).
   */
  claimMany?(inputs: readonly ClaimInput[]): Promise<ClaimResult[]>;
}

/**
 * The store as seen from inside one transaction of transactional mode: the fenced writes that must commit
 * with the business writes, or roll back with them. Everything else (claim, get, reap, waiting) runs on
 * the store itself.
 */
export interface TransactionView {
  /** {@link IdempotencyStore.complete}, committed with the transaction. */
  complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean>;
  /** {@link IdempotencyStore.release}, committed with the transaction. */
  release(claim: Claim): Promise<boolean>;
  /** {@link IdempotencyStore.checkpoint}, committed with the transaction (atomic phases). */
  checkpoint(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined>;
}

/** How long the transaction of {@link TransactionalStore.claimTransaction} may run. */
export interface TransactionBounds {
  /** The longest the transaction stays open, in milliseconds from the won claim (a positive integer). */
  readonly maxExecutionMs: number;
}

/** What {@link TransactionalStore.claimTransaction} resolves: the value of `fn` on a won claim, or the record that stood in the way. */
export type ClaimedTransaction<R> =
  | { readonly acquired: true; readonly claim: Claim; readonly value: R }
  | { readonly acquired: false; readonly record: IdempotencyRecord };

/**
 * A store that can run the caller's business writes and the saved response in one database transaction
 * (transactional mode).
 *
 * @typeParam Tx - the transaction handle the business code writes through (e.g. a `better-sqlite3`
 *   `Database` inside `BEGIN IMMEDIATE`, or a `pg` `PoolClient` inside `BEGIN`)
 */
export interface TransactionalStore<Tx> extends IdempotencyStore {
  /**
   * Runs `fn` inside one transaction; `store` writes the record in that same transaction. The transaction
   * commits when `fn` resolves and rolls back when it rejects; the promise settles only after COMMIT or
   * ROLLBACK.
   */
  transaction<R>(fn: (tx: Tx, store: TransactionView) => Promise<R>): Promise<R>;
  /**
   * Claims `input` and, only when the claim is won, runs `fn` with the claim inside a transaction, as
   * {@link transaction} does. A lost claim resolves `{ acquired: false, record }` without opening a
   * transaction for `fn`. Each store documents where its claim commits: apart from the transaction, so a
   * duplicate sees it at once (PostgreSQL), or with it, so a crash leaves nothing behind (SQLite). Either
   * way, when `fn` rejects the caller still holds the claim's lease token and releases (or hands back) the
   * record through the store; both are fenced, so that is harmless where the claim rolled back.   *
   * With `bounds`, the won claim's lease is kept alive while `fn` runs (where the claim committed apart,
   * as on PostgreSQL: renewed every third of `input.leaseMs`, fenced), and the transaction ends at
   * `bounds.maxExecutionMs` milliseconds, or earlier when a renewal is fenced off or the lease runs out
   * unrenewed; it then rejects with a `LeaseLostError` whose `reason` says which. Without `bounds` the
   * transaction ends with the claim's first lease.
   */
  claimTransaction<R>(
    input: ClaimInput,
    fn: (tx: Tx, store: TransactionView, claim: Claim) => Promise<R>,
    bounds?: TransactionBounds,
  ): Promise<ClaimedTransaction<R>>;
}

/**
 * `store`, whose `close()` then also closes the client it was made on (`closeClient` runs after the store
 * closed): for the stores a URL opens, which own their connection. Every other method stays the store's own,
 * so nothing optional (`claimMany`, `waitFor`, …) is lost on the way.
 */
export function closingClient<S extends IdempotencyStore>(store: S, closeClient: () => unknown): S {
  const close = store.close.bind(store);
  store.close = async () => {
    await close();
    await closeClient();
  };
  return store;
}
