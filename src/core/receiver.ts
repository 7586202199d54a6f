/**
 * The receiver's public types: what identifies an operation ({@link OperationId}), the options every
 * receiver takes, what the work is handed and what {@link Receiver.execute} answers. The engine that
 * implements {@link Receiver} is `engine.ts`.
 *
 * Sources: IETF draft-ietf-httpapi-idempotency-key-header (sections 2.6–2.7), Stripe's idempotent
 * requests, Brandur Leach's "Implementing Stripe-like Idempotency Keys in Postgres".
 *
 * @module
 */
import type { BatchContext, BatchItem, BatchOptions, BatchOutcome } from './batch.js';
import type { Clock } from './clock.js';
import type { ReceiverHealth } from './health.js';
import type { ReceiverObserver } from './observer.js';
import type { Claim, StoredResponse } from './record.js';
import type { ReplayCacheOptions } from './replay-cache.js';
import type { IdempotencyStore, TransactionalStore } from './store.js';

/** What identifies one logical operation. */
export interface OperationId {
  /** Namespace (tenant, principal, job type …); the same key in two scopes is two operations. */
  readonly scope: string;
  /** The idempotency key (already parsed; see `parseIdempotencyKey`). */
  readonly key: string;
  /** Fingerprint of the request (see `fingerprint`); a different one under the same key is refused. */
  readonly fingerprint: string;
}

/** How a duplicate that arrives while the original is still running is answered. */
export type InFlightPolicy = 'reject' | 'wait';

/** Options shared by every receiver. Durations are in milliseconds. */
export interface ReceiverOptions {
  /**
   * How long a claim's lease lasts, in milliseconds, without a renewal. While the work runs in a live
   * process the lease is kept alive: renewed (fenced by its token) every third of `leaseMs`, so the work
   * may run longer than the lease. A process that crashed or froze stops renewing, and its key is taken
   * over by a retry `leaseMs` after the last renewal: a short lease (1–5 s) means a fast takeover after a
   * crash, whatever the work's length. A late holder's result is fenced off. @defaultValue 30_000
   */
  readonly leaseMs?: number;
  /**
   * The longest the work may run, in milliseconds, however alive its process: work that is alive but
   * stuck. Past it the keep-alive stops and the execution rejects with `LeaseLostError` (reason
   * `deadline`, HTTP 409). In plain mode the work cannot be stopped, so the key is left claimed until its
   * lease ends (never released for an immediate retry while the work may still act). In transactional
   * mode it bounds the transaction (the server's `statement_timeout` and
   * `idle_in_transaction_session_timeout` on PostgreSQL), which then rolls back, so no transaction pins
   * the database's snapshot for ever.
   * @defaultValue none in plain mode; in transactional mode 60_000, or `leaseMs` when that is longer
   */
  readonly maxExecutionMs?: number;
  /**
   * Plain mode: how long, in milliseconds, a completion that failed with a store error (a dropped
   * connection, a failover, a full disk) is tried again, with backoff (50 ms doubling up to 1 s), while
   * the keep-alive holds the lease; `complete` is idempotent for its own token, so a try whose reply was
   * lost is harmless. Each failed try is reported as a failed `complete` store call. When every try
   * fails, the execution answers the fresh response with `saved: false` (see {@link Execution.saved}).
   * `0` tries once. @defaultValue 10_000
   */
  readonly completionRetryMs?: number;
  /** How long a completed record is kept and replayed (Stripe keeps keys 24 h). @defaultValue 86_400_000 */
  readonly retentionMs?: number;
  /**
   * `reject`: a duplicate of a running request fails at once with `RequestInProgressError` (HTTP 409
   * + `Retry-After`). `wait`: it waits up to `waitTimeoutMs` for the original's response and replays it.
   * @defaultValue 'reject'
   */
  readonly inFlight?: InFlightPolicy;
  /** Longest wait of a duplicate in `wait` mode before it is answered as in progress. @defaultValue 10_000 */
  readonly waitTimeoutMs?: number;
  /**
   * Poll interval of `wait` mode on a store without `waitFor`; also how long a waiting duplicate sleeps
   * before it claims again when the store calls a lease live that this receiver's clock calls over (the
   * store decides by another clock). @defaultValue 25
   */
  readonly pollIntervalMs?: number;
  /**
   * Decides whether a response is saved for replay (`true`) or the key is released so a retry runs again
   * (`false`). Called once the work has returned its response; one that throws decides `true` (the work's
   * effect happened, and saving never runs it twice): the response is saved, sent, and replayed to retries,
   * and the throw goes to the observer instead of failing the request (`createReceiver`'s `logger` gets a
   * `should_persist_threw` line, error level, with the thrown value as `err`).
   * @defaultValue saves every status below 500 (Stripe v2; IETF draft section 2.6); 5xx are released
   */
  readonly shouldPersist?: (response: StoredResponse) => boolean;
  /**
   * Time source of `wait` mode's pacing (when to look again at a holder's lease). It never decides a
   * takeover: the store does, by its own clock. @defaultValue the system clock
   */
  readonly clock?: Clock;
  /**
   * Generates the owner token of each claim attempt (its lease token; see `ClaimInput.leaseToken`). When
   * the claim fails with a store error (e.g. the connection dropped, perhaps after the claim committed), it
   * is sent once more with the same token, so a claim that did commit is recognised as this request's own
   * instead of answered "in progress" (409) until its lease expires. Must return a fresh unguessable id
   * each call. @defaultValue a random UUID (version 4), as `crypto.randomUUID` makes one
   */
  readonly generateId?: () => string;
  /**
   * Keeps up to `maxEntries` completed records in this process (least recently used out first), so a
   * replay, or a reuse of the key with another fingerprint (422), is answered without a store round trip.
   * A record is cached when this receiver completes it (with its own clock's times: retained `retentionMs`
   * from the completion) or when the store returns it completed, and is used until its `expiresAt` and for
   * at most `maxAgeMs` (default 60,000 ms) after it was cached: a record deleted in the store meanwhile is
   * still replayed by this process until then. Records in progress are never cached, so in-flight
   * duplicates (409 or `wait`) always ask the store. Memory: up to `maxEntries` saved responses, each the
   * cache's own copy. The idea of AWS Lambda Powertools' `useLocalCache`.
   * @defaultValue none: every claim asks the store
   * @throws TypeError from `createReceiver` when `maxEntries` is not a positive integer or `maxAgeMs` not a
   *   positive integer number of milliseconds
   */
  readonly replayCache?: ReplayCacheOptions;
}

/** Options of an engine over a plain store. */
export interface PlainEngineOptions extends ReceiverOptions {
  readonly store: IdempotencyStore;
  readonly transactional?: false;
}

/** Options of an engine in transactional mode. */
export interface TransactionalEngineOptions<Tx> extends ReceiverOptions {
  readonly store: TransactionalStore<Tx>;
  /** The work's writes and the saved response commit in one transaction; the work writes through `context.tx`. */
  readonly transactional: true;
}

/** What the work is handed. */
export interface ExecutionContext<Tx> {
  /** The lease this execution holds; `claim.takeover` tells a resumed execution. */
  readonly claim: Claim;
  /** In transactional mode, the transaction to write business rows through; otherwise `undefined`. */
  readonly tx: Tx;
}

/** The outcome of {@link Receiver.execute}. */
export interface Execution {
  /** The response to send: the fresh one, or the saved one on a replay. */
  readonly response: StoredResponse;
  /** `true` when this is the saved response of an earlier execution. */
  readonly replayed: boolean;
  /**
   * `true` when the response was saved for replay. `false` for a released key (5xx by default), and when
   * a plain store failed to save after the work ran and kept failing for `completionRetryMs`: the key then
   * stays claimed until its lease expires (`leaseMs` after the last renewal), and a retry after that runs
   * the work again (the completion was lost).
   */
  readonly saved: boolean;
}

/** The engine. Create one with `createReceiver` (or `createEngine`, to choose its observer). */
export interface Receiver<Tx = undefined> {
  /** The resolved, frozen options. */
  readonly options: Readonly<Required<Omit<ReceiverOptions, 'clock' | 'replayCache' | 'maxExecutionMs'>>> & {
    readonly clock: Clock;
    /** The resolved `maxExecutionMs`: `undefined` for none. */
    readonly maxExecutionMs: number | undefined;
    readonly replayCache: Readonly<Required<ReplayCacheOptions>> | undefined;
  };
  readonly store: IdempotencyStore;
  /**
   * Runs `work` at most once per (scope, key) and returns its response, or replays the saved one.
   *
   * @throws `IdempotencyKeyReusedError` — the key is held by a request with another fingerprint (422)
   * @throws `RequestInProgressError` — the original is still running (`reject` mode, or `wait` timed out) (409)
   * @throws `LeaseLostError` — this execution's lease was taken over; its response was not saved (409)
   * @throws `StoreUnavailableError` — the store failed before the work ran (503); the work did not run
   * @throws whatever `work` throws; the key is released (or the transaction rolled back) first
   */
  execute(id: OperationId, work: (context: ExecutionContext<Tx>) => Promise<StoredResponse>): Promise<Execution>;
  /**
   * {@link Receiver.execute} without the promise when the answer is known at once: on a store that decides
   * in this process (the memory store), a replay comes back as the {@link Execution} itself and a refusal
   * (422, 409 in `reject` mode) is thrown in place; anything that waits (the work, a store round trip, `wait`
   * mode) comes back as the promise `execute` returns. For adapters that can answer in the same turn.
   *
   * @throws as {@link Receiver.execute} rejects, when the answer is known at once
   */
  executeNow(id: OperationId, work: (context: ExecutionContext<Tx>) => Promise<StoredResponse>): Execution | Promise<Execution>;
  /**
   * The function API: runs `fn` once per (scope, key) and returns its result; a retry with the same key and
   * fingerprint returns the first result (JSON round-tripped) without calling `fn`.
   * Throws as {@link Receiver.execute} does.
   *
   * @example
   * ```ts
   * const receipt = await receiver.run(
   *   { scope: 'jobs', key: job.id, fingerprint: fingerprint({ method: 'JOB', route: 'send-invoice', body: JSON.stringify(job) }) },
   *   async () => sendInvoice(job),
   * );
   * ```
   */
  run<T>(id: OperationId, fn: (context: ExecutionContext<Tx>) => Promise<T>): Promise<T>;
  /**
   * Runs a batch: each item is its own operation (scope, key, fingerprint); the batch is claimed at once
   * (the store's `claimMany`: one round trip or one transaction; else one claim per item), `fn` runs for
   * each won item, at most `options.concurrency` at once, and the answer is one outcome per item in input
   * order (`executed`, `replayed`, `in_flight`, `mismatch`, `failed`). A failed item is released, never
   * saved. An item whose key appears earlier in the batch shares that item's outcome (a replay of its
   * execution), or is `mismatch` when its fingerprint differs. `in_flight` is answered at once (the
   * `wait` policy applies to `execute` only). In transactional mode each item's writes commit with its own
   * completion, or all together with `atomic: true`. Never rejects for an item: a store that cannot claim
   * makes every item `failed` with `StoreUnavailableError`.
   *
   * @throws TypeError when `fn` or an option is invalid
   * @example
   * ```ts
   * const outcomes = await receiver.runBatch(
   *   orders.map((order) => ({ scope: 'orders', key: order.id, fingerprint: fingerprint({ method: 'JOB', route: 'ship', body: JSON.stringify(order) }), input: order })),
   *   async (order) => ship(order),
   *   { concurrency: 16 },
   * );
   * ```
   */
  runBatch<I, T>(items: readonly BatchItem<I>[], fn: (input: I, context: BatchContext<Tx>) => Promise<T>, options?: BatchOptions): Promise<BatchOutcome<T>[]>;
  /**
   * Whether the store answers and accepts writes (a claim and release in a reserved scope, at most one per
   * 5 s), and how many keys sit `in_progress` past their lease (see {@link ReceiverHealth}). Never throws:
   * an unreachable or read-only store is reported as such.
   */
  health(): Promise<ReceiverHealth>;
  /** Where the receiver reports outcomes, durations and takeovers (the HTTP adapters report invalid keys here). */
  readonly observer: ReceiverObserver;
}
