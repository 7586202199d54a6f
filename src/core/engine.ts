/**
 * The engine: turns (scope, key, fingerprint) plus a unit of work into "the work runs once; every retry
 * gets the first answer". Framework-free; the HTTP adapters and the function API are built
 * on {@link Receiver.execute}. It reports what happens to a {@link ReceiverObserver}; the package's
 * `createReceiver` builds it with the OpenTelemetry observer. Its public types are in `receiver.ts`.
 *
 * Sources: IETF draft-ietf-httpapi-idempotency-key-header (sections 2.6–2.7), Stripe's idempotent
 * requests, Brandur Leach's "Implementing Stripe-like Idempotency Keys in Postgres".
 *
 * @module
 */
import { runBatch, type BatchContext, type BatchItem, type BatchOptions, type BatchOutcome } from './batch.js';
import { IdempotencyError, LeaseLostError, RequestInProgressError, StoreUnavailableError } from './errors.js';
import { receiverHealth, WriteProbe, type ReceiverHealth } from './health.js';
import { claimResult, DeadlineReached, lostResult, NO_RESULT, persists, retryFor, Rollback, TOOK_EFFECT, withDeadline, WorkFailed } from './attempt-end.js';
import { KeepAlive } from './keep-alive.js';
import { waitForChange } from './wait-for-change.js';
import { SILENT_OBSERVER, type ReceiverObserver, type StoreCallObservation, type StoreCallResult, type StoreOperation } from './observer.js';
import type {
  Execution,
  ExecutionContext,
  OperationId,
  PlainEngineOptions,
  Receiver,
  TransactionalEngineOptions,
} from './receiver.js';
import type { Claim, IdempotencyRecord, StoredResponse } from './record.js';
import type { ReplayCache } from './replay-cache.js';
import { observedCall } from './observed-call.js';
import { resolveEngineOptions } from './engine-options.js';
import { RequestRun } from './request-run.js';
import { settledValue, UNSETTLED, whenSettled } from './settled.js';
import { answerStanding } from './standing.js';
import { claimInputOf, type ClaimedTransaction, type ClaimInput, type ClaimResult, type IdempotencyStore, type TransactionalStore, type TransactionView } from './store.js';

/**
 * Creates the engine over a store, reporting to the observer `observe` returns (called once, with the
 * store, after the options are checked). `createReceiver` is this with the OpenTelemetry observer.
 *
 * @param observe - builds the observer from the store; by default one that reports nothing
 * @throws TypeError naming the option when an option is invalid (e.g. `leaseMs` not a positive integer,
 *   `leaseMs` > `retentionMs`, `transactional: true` on a store without `claimTransaction`)
 */
export function createEngine<Tx = undefined>(
  options: PlainEngineOptions | TransactionalEngineOptions<Tx>,
  observe: (store: IdempotencyStore) => ReceiverObserver = () => SILENT_OBSERVER,
): Receiver<Tx> {
  return new Engine<Tx>(options, observe);
}

const JSON_HEADERS = Object.freeze({ 'content-type': 'application/json' });
const encoder = new TextEncoder();
const decoder = new TextDecoder();


class Engine<Tx> implements Receiver<Tx> {
  readonly options: Receiver<Tx>['options'];
  readonly store: IdempotencyStore;
  readonly observer: ReceiverObserver;
  private readonly transactional: boolean;
  /** Completed records kept in this process (the `replayCache` option), or none. */
  private readonly replays: ReplayCache | undefined;
  /** Made on the first health check, so a receiver that is never checked never probes. */
  private writeProbe: WriteProbe | undefined;
  /** Renews the leases of plain mode's running work and of batch items (transactional stores renew a request's own). */
  private readonly keepAlive: KeepAlive;
  /** The `maxExecutionMs` option as resolved: `undefined` for none. */
  private readonly maxExecutionMs: number | undefined;

  constructor(
    options: PlainEngineOptions | TransactionalEngineOptions<Tx>,
    observe: (store: IdempotencyStore) => ReceiverObserver,
  ) {
    const resolved = resolveEngineOptions(options);
    this.store = resolved.store;
    this.transactional = resolved.transactional;
    this.replays = resolved.replays;
    this.maxExecutionMs = resolved.maxExecutionMs;
    this.options = resolved.options;
    this.observer = observe(options.store);
    this.keepAlive = new KeepAlive(this.store, this.options.leaseMs, this.observer);
  }

  health(): Promise<ReceiverHealth> {
    this.writeProbe ??= new WriteProbe(this.store);
    return receiverHealth(this.store, this.writeProbe);
  }

  execute(id: OperationId, work: (context: ExecutionContext<Tx>) => Promise<StoredResponse>): Promise<Execution> {
    let answer: Execution | Promise<Execution>;
    try {
      answer = this.executeNow(id, work);
    } catch (error) {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passed on as it came, as an `async` function would
      return Promise.reject(error);
    }
    return answer instanceof Promise ? answer : Promise.resolve(answer);
  }

  // Hot path: docs/hot-path.md#engine-store-calls
  /** Not an `async` function: an answer the store gave at once ends the observation in place, else one `then` on the attempt's promise does. */
  executeNow(id: OperationId, work: (context: ExecutionContext<Tx>) => Promise<StoredResponse>): Execution | Promise<Execution> {
    const request = new RequestRun(this.observer.request(id.scope, id.key), work, this.options.waitTimeoutMs);
    let attempt: Execution | Promise<Execution>;
    try {
      attempt = request.observation.within(() => this.attempt(id, request));
    } catch (error) {
      request.ended(error);
      throw error;
    }
    if (!(attempt instanceof Promise)) return request.answered(attempt);
    return whenSettled(
      attempt,
      (execution) => request.answered(execution),
      (error: unknown) => {
        request.ended(error);
        throw error;
      },
    );
  }

  /**
   * One attempt at `id`: a completed record in the replay cache answers at once; otherwise a claim, then
   * the work on a won claim. A claim lost to a running request is answered by {@link Engine.inFlight},
   * which may wait and attempt again. Answers in place (or throws) when the store decided at once.
   */
  private attempt(id: OperationId, request: RequestRun<Tx>): Execution | Promise<Execution> {
    const cached = this.replays?.get(id.scope, id.key, this.options.clock.now());
    if (cached !== undefined) return this.answer(id, request, cached);
    return this.transactional ? this.attemptInTransaction(id, request) : this.attemptPlain(id, request);
  }

  /**
   * A claim lost to a request still in flight, in `wait` mode with wait budget left (see {@link Engine.answer}):
   * waits for the record to change, within the budget, and attempts again.
   */
  private async inFlight(id: OperationId, request: RequestRun<Tx>, holder: IdempotencyRecord): Promise<Execution> {
    // Wake no later than the holder's lease expiry, when a takeover becomes possible. A lease the store
    // called live but this clock calls over means the clocks differ (PostgreSQL and Redis decide by the
    // server's): look again after a poll interval rather than spinning on claims.
    const untilLeaseEnds = holder.leaseExpiresAt - this.options.clock.now();
    const slice = Math.min(request.budgetMs, untilLeaseEnds > 0 ? untilLeaseEnds : this.options.pollIntervalMs);
    request.budgetMs -= slice;
    request.waited = true;
    await waitForChange(this.store, id, slice, this.options, (operation, call) => this.call(operation, call, NO_RESULT));
    // Completed, released or taken over: claim again and let the store decide.
    return await this.attempt(id, request);
  }

  async run<T>(id: OperationId, fn: (context: ExecutionContext<Tx>) => Promise<T>): Promise<T> {
    const execution = await this.execute(id, async (context) => {
      const value = await fn(context);
      const text = JSON.stringify(value) as string | undefined;
      return { status: 200, headers: JSON_HEADERS, body: text === undefined ? new Uint8Array() : encoder.encode(text) };
    });
    const body = execution.response.body;
    return (body.byteLength === 0 ? undefined : JSON.parse(decoder.decode(body))) as T;
  }

  runBatch<I, T>(items: readonly BatchItem<I>[], fn: (input: I, context: BatchContext<Tx>) => Promise<T>, options?: BatchOptions): Promise<BatchOutcome<T>[]> {
    const engine = { receiver: this, transactional: this.transactional, keepAlive: this.keepAlive, retryCompletion: (claim: Claim, response: StoredResponse) => this.retryCompletion(claim, response) };
    return runBatch(engine, items, fn, options);
  }

  // Hot path: docs/hot-path.md#engine-store-calls
  /**
   * Plain mode: claim, work, complete (or release) as separate store operations. The store calls are
   * observed in place (not through {@link Engine.call}): on the path every request takes, a wrapper would
   * cost each call one more promise. No step is an `async` function: a store promise made by `settled`
   * (the memory store's) is read at once, any other is chained onto once.
   */
  private attemptPlain(id: OperationId, request: RequestRun<Tx>): Execution | Promise<Execution> {
    const input = this.claimInput(id);
    const claimedAt = this.replays === undefined ? 0 : this.options.clock.now();
    const claiming = this.observer.storeCall('claim');
    let pending: Promise<ClaimResult>;
    try {
      pending = this.store.claim(input);
    } catch (first) {
      return this.claimAgain(id, request, input, claimedAt, claiming, first);
    }
    const result = settledValue(pending);
    if (result !== UNSETTLED) return this.claimed(id, request, input, claimedAt, claiming, result);
    return pending.then(
      (value) => this.claimed(id, request, input, claimedAt, claiming, value),
      (first: unknown) => this.claimAgain(id, request, input, claimedAt, claiming, first),
    );
  }

  /**
   * A claim that failed: its reply may have been lost after it committed, so it is tried once more with the
   * same owner token, which the store then answers as this request's own claim.
   */
  private async claimAgain(
    id: OperationId,
    request: RequestRun<Tx>,
    input: ClaimInput,
    claimedAt: number,
    failed: StoreCallObservation,
    first: unknown,
  ): Promise<Execution> {
    failed.fail(first);
    const claiming = this.observer.storeCall('claim');
    let result: ClaimResult;
    try {
      result = await this.store.claim(input);
    } catch (error) {
      claiming.fail(error);
      throw new StoreUnavailableError(error);
    }
    return await this.claimed(id, request, input, claimedAt, claiming, result);
  }

  /** The plain claim's answer: the record that stood in the way answered, or the work run under the won claim. */
  private claimed(
    id: OperationId,
    request: RequestRun<Tx>,
    input: ClaimInput,
    claimedAt: number,
    claiming: StoreCallObservation,
    result: ClaimResult,
  ): Execution | Promise<Execution> {
    claiming.end(claimResult(input, result));
    if (!result.acquired) return this.lost(id, request, result.record);
    const claim = result.claim;
    if (claim.takeover) this.observer.takeover(id.scope, id.key);
    // Reported before the lease is held: an observer that throws here leaves the claim to its lease's end.
    request.workStarted();
    this.keepAlive.hold(claim);
    let working: Promise<StoredResponse>;
    try {
      const context: ExecutionContext<Tx> = { claim, tx: undefined as Tx };
      working = this.maxExecutionMs === undefined ? Promise.resolve(request.work(context)) : withDeadline(() => request.work(context), this.maxExecutionMs);
    } catch (error) {
      return this.workFailed(id, request, claim, error);
    }
    // Hot path: docs/hot-path.md#fastify-same-turn-completion
    // A response handed over synchronously (a `Pending`'s) is completed in the call that hands it over, in
    // the request's observation as a `then` would be.
    return whenSettled(
      working,
      (response) => request.observation.within(() => this.worked(id, claim, claimedAt, request, response)),
      (error: unknown) => this.workFailed(id, request, claim, error),
    );
  }

  /** The plain work threw (or ran out its `maxExecutionMs`): the key is released for a retry, or left to its lease. */
  private async workFailed(id: OperationId, request: RequestRun<Tx>, claim: Claim, error: unknown): Promise<never> {
    this.keepAlive.drop(claim);
    if (error instanceof DeadlineReached) {
      // The work may still be under way: the key is left to its lease's end, not released for a retry.
      throw new LeaseLostError(id.scope, id.key, 'deadline');
    }
    request.workFailed(error);
    await this.release(claim);
    throw error;
  }

  /**
   * The plain work's response: saved (completed in place when the store decides at once), or released. An
   * observer that throws on the way (breaking its contract) ends the request with its throw and lets go of
   * the lease, which runs out as a crashed holder's would: the work ran, so the key is not released for a
   * retry to run it again at once.
   */
  private worked(id: OperationId, claim: Claim, claimedAt: number, request: RequestRun<Tx>, response: StoredResponse): Execution | Promise<Execution> {
    try {
      request.workSucceeded();
      if (!persists(this.options.shouldPersist, response, this.observer, id)) {
        this.keepAlive.drop(claim);
        return this.release(claim).then(() => ({ response, replayed: false, saved: false }));
      }
      const completing = this.observer.storeCall('complete');
      let pending: Promise<boolean>;
      try {
        pending = this.store.complete(claim, response, this.options.retentionMs);
      } catch (error) {
        return this.completeAgain(id, claim, claimedAt, response, completing, error);
      }
      const saved = settledValue(pending);
      if (saved !== UNSETTLED) return this.completed(id, claim, claimedAt, response, completing, saved);
      return pending.then(
        (value) => this.completed(id, claim, claimedAt, response, completing, value),
        (error: unknown) => this.completeAgain(id, claim, claimedAt, response, completing, error),
      );
    } catch (error) {
      this.keepAlive.drop(claim);
      throw error;
    }
  }

  /** The completion's answer: the execution, or a {@link LeaseLostError} when it was fenced off. */
  private completed(id: OperationId, claim: Claim, claimedAt: number, response: StoredResponse, completing: StoreCallObservation, saved: boolean): Execution {
    this.keepAlive.drop(claim);
    completing.end(saved);
    if (!saved) throw new LeaseLostError(id.scope, id.key);
    this.rememberCompleted(claim, response, claimedAt);
    return { response, replayed: false, saved: true };
  }

  /** A completion that failed with a store error, tried again (see {@link Engine.retryCompletion}). */
  private async completeAgain(
    id: OperationId,
    claim: Claim,
    claimedAt: number,
    response: StoredResponse,
    completing: StoreCallObservation,
    error: unknown,
  ): Promise<Execution> {
    let retried: boolean | undefined;
    try {
      completing.fail(error);
      retried = await this.retryCompletion(claim, response);
    } finally {
      // Also when the observer threw (see Engine.worked): the lease runs out as a crashed holder's would.
      this.keepAlive.drop(claim);
    }
    if (retried === undefined) return { response, replayed: false, saved: false };
    if (!retried) throw new LeaseLostError(id.scope, id.key);
    this.rememberCompleted(claim, response, claimedAt);
    return { response, replayed: false, saved: true };
  }

  /**
   * Tries a failed completion again for `completionRetryMs`: whether it took effect, or `undefined` when
   * every try failed (reported as abandoned). The effect happened; `complete` is idempotent for its token, so
   * it is tried again while the keep-alive still holds the lease.
   */
  private async retryCompletion(claim: Claim, response: StoredResponse): Promise<boolean | undefined> {
    const retried = await retryFor(this.options.completionRetryMs, () => this.call('complete', () => this.store.complete(claim, response, this.options.retentionMs), TOOK_EFFECT));
    if (retried === undefined) this.observer.completionAbandoned(claim.scope, claim.key);
    return retried;
  }

  /**
   * Transactional mode: the store claims, then work and complete run in one transaction on a won claim.
   * A rolled-back transaction leaves the claim to release here (where the store committed it apart).
   */
  private async attemptInTransaction(id: OperationId, request: RequestRun<Tx>): Promise<Execution> {
    const store = this.store as TransactionalStore<Tx>;
    let claim: Claim | undefined;
    let outcome: ClaimedTransaction<Execution>;
    const input = this.claimInput(id);
    const claimedAt = this.replays === undefined ? 0 : this.options.clock.now();
    try {
      const run = (): Promise<ClaimedTransaction<Execution>> => this.claimTransaction(store, input, async (tx, view, held): Promise<Execution> => {
        claim = held;
        let response: StoredResponse;
        request.workStarted();
        try {
          response = await request.work({ claim: held, tx });
        } catch (error) {
          request.workFailed(error);
          throw new WorkFailed(error);
        }
        request.workSucceeded();
        if (!persists(this.options.shouldPersist, response, this.observer, id)) throw new Rollback(response);
        if (!(await this.call('complete', () => view.complete(held, response, this.options.retentionMs), TOOK_EFFECT))) {
          throw new WorkFailed(new LeaseLostError(id.scope, id.key));
        }
        return { response, replayed: false, saved: true };
      });
      outcome = await run().catch((failure: unknown) => {
        // Failed before the work ran, perhaps after the claim committed: claim again with the same owner
        // token, which the store recognises as this request's own claim. Once only.
        if (claim !== undefined || failure instanceof IdempotencyError) throw failure;
        return run();
      });
    } catch (failure) {
      if (claim) await this.release(claim);
      if (failure instanceof Rollback) return { response: failure.response, replayed: false, saved: false };
      if (failure instanceof WorkFailed) throw failure.error;
      // A store's own typed faults (closed, misused, an aborted transaction) still mean the store could
      // not do its part: fail closed as unavailable, with the fault as the cause.
      if (failure instanceof IdempotencyError && !failure.code.startsWith('store-')) throw failure;
      throw new StoreUnavailableError(failure);
    }
    if (!outcome.acquired) return this.lost(id, request, outcome.record);
    // Committed with the business writes: the claim was set when the transaction started.
    if (outcome.value.saved && claim !== undefined) this.rememberCompleted(claim, outcome.value.response, claimedAt);
    return outcome.value;
  }

  /**
   * The store's `claimTransaction`, its claim observed from the call to the transaction's start (or to the
   * record that stood in the way).
   */
  private async claimTransaction<R>(
    store: TransactionalStore<Tx>,
    input: ClaimInput,
    fn: (tx: Tx, view: TransactionView, claim: Claim) => Promise<R>,
  ): Promise<ClaimedTransaction<R>> {
    const observation = this.observer.storeCall('claim');
    let claiming = true;
    try {
      const bounds = { maxExecutionMs: this.maxExecutionMs ?? this.options.leaseMs };
      const outcome = await store.claimTransaction(input, (tx, view, claim) => {
        claiming = false;
        observation.end(claim.takeover ? 'takeover' : 'acquired');
        if (claim.takeover) this.observer.takeover(input.scope, input.key);
        return fn(tx, view, claim);
      }, bounds);
      if (!outcome.acquired) {
        claiming = false;
        observation.end(lostResult(input, outcome.record));
      }
      return outcome;
    } catch (error) {
      if (claiming) observation.fail(error);
      throw error;
    }
  }

  /** Releases `claim` so a retry runs again; a failed release leaves the key to its lease's expiry. */
  private async release(claim: Claim): Promise<void> {
    await this.call('release', () => this.store.release(claim), TOOK_EFFECT).catch(() => false);
  }

  /** One store call, observed (see {@link observedCall}). */
  private call<T>(operation: StoreOperation, call: () => Promise<T>, result: (value: T) => StoreCallResult): Promise<T> {
    return observedCall(this.observer, operation, call, result);
  }

  /** The claim input of `id`, with a fresh owner token for this attempt. */
  private claimInput(id: OperationId): ClaimInput {
    return claimInputOf(id, this.options, this.options.generateId());
  }

  /** Keeps the record just completed in the replay cache, when there is one (see {@link ReplayCache.rememberCompleted}). */
  private rememberCompleted(claim: Claim, response: StoredResponse, claimedAt: number): void {
    this.replays?.rememberCompleted(claim, response, claimedAt, this.options.clock.now(), this.options.retentionMs);
  }

  /** The answer to a claim lost to `record`, which the store returned (and the replay cache keeps if completed). */
  private lost(id: OperationId, request: RequestRun<Tx>, record: IdempotencyRecord): Execution | Promise<Execution> {
    this.replays?.remember(record, this.options.clock.now());
    return this.answer(id, request, record);
  }

  /**
   * The answer to `record` standing in the way: a replay, a reused key (422, thrown), or a request in flight
   * (409, thrown, unless `wait` mode waits).
   */
  private answer(id: OperationId, request: RequestRun<Tx>, record: IdempotencyRecord): Execution | Promise<Execution> {
    const response = answerStanding(record, id);
    if (response !== undefined) return { response, replayed: true, saved: true };
    // The wait budget is counted in the time actually waited, so a fake clock cannot stall it.
    if (this.options.inFlight === 'reject' || request.budgetMs <= 0) throw new RequestInProgressError(record);
    return this.inFlight(id, request, record);
  }
}
