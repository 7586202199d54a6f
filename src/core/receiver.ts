/**
 * The engine: turns (scope, key, fingerprint) plus a unit of work into "the work runs once; every retry
 * gets the first answer". Framework-free; the HTTP adapters and the function API are built
 * on {@link Receiver.execute}. It reports what happens to a {@link ReceiverObserver}; the package's
 * `createReceiver` builds it with the OpenTelemetry observer.
 *
 * Sources: IETF draft-ietf-httpapi-idempotency-key-header (sections 2.6–2.7), Stripe's idempotent
 * requests, Brandur Leach's "Implementing Stripe-like Idempotency Keys in Postgres".
 *
 * @module
 */
import { systemClock, type Clock } from './clock.js';
import { describe, requireDurationMs } from './validate.js';
import {
  IdempotencyError,
  IdempotencyKeyReusedError,
  LeaseLostError,
  RequestInProgressError,
  StoreUnavailableError,
} from './errors.js';
import { receiverHealth, type ReceiverHealth } from './health.js';
import { randomLeaseToken } from './lease-token.js';
import {
  SILENT_OBSERVER,
  type Observation,
  type ReceiverObserver,
  type RequestOutcome,
  type StoreCallResult,
  type StoreOperation,
} from './observer.js';
import { requireGenerateId, requireOptions } from './validate.js';
import { frozenResponse, type Claim, type IdempotencyRecord, type StoredResponse } from './record.js';
import { ReplayCache, type ReplayCacheOptions } from './replay-cache.js';
import { claimInputOf, type ClaimedTransaction, type ClaimInput, type ClaimResult, type IdempotencyStore, type TransactionalStore, type TransactionView } from './store.js';

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
   * How long a claim's lease lasts. Must outlast the work: when it expires a retry may take the record
   * over and run again, and the late holder's result is fenced off. @defaultValue 30_000
   */
  readonly leaseMs?: number;
  /** How long a completed record is kept and replayed (Stripe keeps keys 24 h). @defaultValue 86_400_000 */
  readonly retentionMs?: number;
  /**
   * `reject`: a duplicate of a running request fails at once with {@link RequestInProgressError} (HTTP 409
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
   * (`false`). @defaultValue saves every status below 500 (Stripe v2; IETF draft section 2.6); 5xx are released
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
   * a plain store failed to save after the work ran (the key then stays claimed until its lease expires).
   */
  readonly saved: boolean;
}

/** The engine. Create one with `createReceiver` (or {@link createEngine}, to choose its observer). */
export interface Receiver<Tx = undefined> {
  /** The resolved, frozen options. */
  readonly options: Readonly<Required<Omit<ReceiverOptions, 'clock' | 'replayCache'>>> & {
    readonly clock: Clock;
    readonly replayCache: Readonly<Required<ReplayCacheOptions>> | undefined;
  };
  readonly store: IdempotencyStore;
  /**
   * Runs `work` at most once per (scope, key) and returns its response, or replays the saved one.
   *
   * @throws {@link IdempotencyKeyReusedError} — the key is held by a request with another fingerprint (422)
   * @throws {@link RequestInProgressError} — the original is still running (`reject` mode, or `wait` timed out) (409)
   * @throws {@link LeaseLostError} — this execution's lease was taken over; its response was not saved (409)
   * @throws {@link StoreUnavailableError} — the store failed before the work ran (503); the work did not run
   * @throws whatever `work` throws; the key is released (or the transaction rolled back) first
   */
  execute(id: OperationId, work: (context: ExecutionContext<Tx>) => Promise<StoredResponse>): Promise<Execution>;
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
   * Whether the store answers, and how many keys sit `in_progress` past their lease (see
   * {@link ReceiverHealth}). Never throws: an unreachable store is reported as such.
   */
  health(): Promise<ReceiverHealth>;
  /** Where the receiver reports outcomes, durations and takeovers (the HTTP adapters report invalid keys here). */
  readonly observer: ReceiverObserver;
}

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

/** Saves every status below 500; releases server errors. */
function persistBelow500(response: StoredResponse): boolean {
  return response.status < 500;
}

/** Thrown inside a transaction to roll it back while still answering with `response`. */
class Rollback extends Error {
  constructor(readonly response: StoredResponse) {
    super('rolled back: the response is not to be saved');
  }
}

/** Wraps the work's own failure so it is told apart from a store failure. */
class WorkFailed extends Error {
  constructor(readonly error: unknown) {
    super('the work failed', { cause: error });
  }
}

/**
 * One request through {@link Engine.execute}: its observation, its work, the time it may still wait for a
 * request in flight, and how it went so far.
 */
class RequestRun<Tx> {
  /** Milliseconds left of `waitTimeoutMs`, counted in the time actually waited. */
  budgetMs: number;
  /** Whether the request waited for another's response (`wait` mode). */
  waited = false;
  /** The work's own throw, told apart from the receiver's (the work may call another receiver). */
  private thrown: { readonly error: unknown } | undefined;

  constructor(
    readonly observation: Observation,
    readonly work: (context: ExecutionContext<Tx>) => Promise<StoredResponse>,
    waitTimeoutMs: number,
  ) {
    this.budgetMs = waitTimeoutMs;
  }

  /** The work starts under a won claim. */
  workStarted(): void {
    this.observation.workStarted();
  }

  /** The work returned a response. */
  workSucceeded(): void {
    this.observation.workEnded(false);
  }

  /** The work threw `error`. */
  workFailed(error: unknown): void {
    this.thrown = { error };
    this.observation.workEnded(true);
  }

  /** Whether `error` is the work's own throw. */
  threw(error: unknown): boolean {
    return this.thrown !== undefined && this.thrown.error === error;
  }
}

/** The result of a store call that says nothing beyond its success. */
const NO_RESULT = (): StoreCallResult => undefined;
/** `complete` and `release` report whether they took effect. */
const TOOK_EFFECT = (done: boolean): StoreCallResult => done;

class Engine<Tx> implements Receiver<Tx> {
  readonly options: Receiver<Tx>['options'];
  readonly store: IdempotencyStore;
  readonly observer: ReceiverObserver;
  private readonly transactional: boolean;
  /** Completed records kept in this process (the `replayCache` option), or none. */
  private readonly replays: ReplayCache | undefined;

  constructor(
    options: PlainEngineOptions | TransactionalEngineOptions<Tx>,
    observe: (store: IdempotencyStore) => ReceiverObserver,
  ) {
    requireOptions('createReceiver', options);
    const store = options.store as unknown;
    if (typeof store !== 'object' || store === null || typeof (store as IdempotencyStore).claim !== 'function') {
      throw new TypeError(`retrysafe: option "store" must be an IdempotencyStore, got ${describe(store)}`);
    }
    this.store = options.store;
    this.transactional = options.transactional === true;
    if (this.transactional && typeof (options.store as Partial<TransactionalStore<Tx>>).claimTransaction !== 'function') {
      throw new TypeError('retrysafe: option "transactional" is true but the store has no claimTransaction() method');
    }
    const leaseMs = requireDurationMs('leaseMs', options.leaseMs ?? 30_000);
    const retentionMs = requireDurationMs('retentionMs', options.retentionMs ?? 86_400_000);
    if (leaseMs > retentionMs) {
      throw new TypeError(`retrysafe: option "leaseMs" (${leaseMs}) must not exceed "retentionMs" (${retentionMs})`);
    }
    const inFlight = options.inFlight ?? 'reject';
    if (inFlight !== 'reject' && inFlight !== 'wait') {
      throw new TypeError(`retrysafe: option "inFlight" must be "reject" or "wait", got ${describe(inFlight)}`);
    }
    const shouldPersist = options.shouldPersist ?? persistBelow500;
    if (typeof shouldPersist !== 'function') {
      throw new TypeError(`retrysafe: option "shouldPersist" must be a function, got ${describe(shouldPersist)}`);
    }
    const clock = options.clock ?? systemClock;
    if (typeof clock.now !== 'function') {
      throw new TypeError(`retrysafe: option "clock" must have a now() method, got ${describe(clock)}`);
    }
    const generateId = requireGenerateId(options.generateId ?? randomLeaseToken);
    this.replays = options.replayCache === undefined ? undefined : new ReplayCache(options.replayCache);
    this.options = Object.freeze({
      generateId,
      leaseMs,
      retentionMs,
      inFlight,
      waitTimeoutMs: requireDurationMs('waitTimeoutMs', options.waitTimeoutMs ?? 10_000),
      pollIntervalMs: requireDurationMs('pollIntervalMs', options.pollIntervalMs ?? 25),
      shouldPersist,
      clock,
      replayCache: this.replays?.options,
    });
    this.observer = observe(options.store);
  }

  health(): Promise<ReceiverHealth> {
    return receiverHealth(this.store);
  }

  async execute(id: OperationId, work: (context: ExecutionContext<Tx>) => Promise<StoredResponse>): Promise<Execution> {
    const request = new RequestRun(this.observer.request(id.scope, id.key), work, this.options.waitTimeoutMs);
    let execution: Execution;
    try {
      execution = await request.observation.within(() => this.attempt(id, request));
    } catch (error) {
      request.observation.end(request.threw(error) ? 'released_after_error' : outcomeOf(error), error);
      throw error;
    }
    request.observation.end(execution.replayed ? (request.waited ? 'waited' : 'replayed') : 'executed');
    return execution;
  }

  /**
   * One attempt at `id`: a completed record in the replay cache answers at once; otherwise a claim, then
   * the work on a won claim. A claim lost to a running request is answered by {@link Engine.inFlight},
   * which may wait and attempt again.
   */
  private attempt(id: OperationId, request: RequestRun<Tx>): Promise<Execution> {
    const cached = this.replays?.get(id.scope, id.key, this.options.clock.now());
    if (cached !== undefined) {
      try {
        return Promise.resolve(this.answer(id, request, cached));
      } catch (error) {
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the engine's own typed error (422), passed on as it came
        return Promise.reject(error);
      }
    }
    return this.transactional ? this.attemptInTransaction(id, request) : this.attemptPlain(id, request);
  }

  /**
   * A claim lost to a request still in flight: `reject` mode answers 409 at once; `wait` mode waits for
   * the record to change, within the wait budget, and attempts again.
   */
  private async inFlight(id: OperationId, request: RequestRun<Tx>, holder: IdempotencyRecord): Promise<Execution> {
    // The wait budget is counted in the time actually waited, so a fake clock cannot stall it.
    if (this.options.inFlight === 'reject' || request.budgetMs <= 0) throw new RequestInProgressError(holder);
    // Wake no later than the holder's lease expiry, when a takeover becomes possible. A lease the store
    // called live but this clock calls over means the clocks differ (PostgreSQL and Redis decide by the
    // server's): look again after a poll interval rather than spinning on claims.
    const untilLeaseEnds = holder.leaseExpiresAt - this.options.clock.now();
    const slice = Math.min(request.budgetMs, untilLeaseEnds > 0 ? untilLeaseEnds : this.options.pollIntervalMs);
    request.budgetMs -= slice;
    request.waited = true;
    await this.waitForChange(id, slice);
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

  // Hot path: docs/hot-path.md#engine-store-calls
  /**
   * Plain mode: claim, work, complete (or release) as separate store operations. The store calls are
   * observed in place (not through {@link Engine.call}): on the path every request takes, a wrapper would
   * cost each call one more promise.
   */
  private async attemptPlain(id: OperationId, request: RequestRun<Tx>): Promise<Execution> {
    const input = this.claimInput(id);
    const claimedAt = this.replays === undefined ? 0 : this.options.clock.now();
    let result: ClaimResult;
    let claiming = this.observer.storeCall('claim');
    try {
      result = await this.store.claim(input);
    } catch (first) {
      claiming.fail(first);
      // A claim whose reply was lost may have committed: the second try, with the same owner token, is
      // then answered as this request's own claim.
      claiming = this.observer.storeCall('claim');
      try {
        result = await this.store.claim(input);
      } catch (error) {
        claiming.fail(error);
        throw new StoreUnavailableError(error);
      }
    }
    claiming.end(claimResult(input, result));
    if (!result.acquired) return this.lost(id, request, result.record);
    const claim = result.claim;
    if (claim.takeover) this.observer.takeover(id.scope, id.key);
    let response: StoredResponse;
    request.workStarted();
    try {
      response = await request.work({ claim, tx: undefined as Tx });
    } catch (error) {
      request.workFailed(error);
      await this.release(claim);
      throw error;
    }
    request.workSucceeded();
    if (!this.options.shouldPersist(response)) {
      await this.release(claim);
      return { response, replayed: false, saved: false };
    }
    const completing = this.observer.storeCall('complete');
    let saved: boolean;
    try {
      saved = await this.store.complete(claim, response, this.options.retentionMs);
    } catch (error) {
      completing.fail(error);
      // The effect happened; answer it. The key stays claimed until its lease expires.
      return { response, replayed: false, saved: false };
    }
    completing.end(saved);
    if (!saved) throw new LeaseLostError(id.scope, id.key);
    this.rememberCompleted(claim, response, claimedAt);
    return { response, replayed: false, saved: true };
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
        if (!this.options.shouldPersist(response)) throw new Rollback(response);
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
      const outcome = await store.claimTransaction(input, (tx, view, claim) => {
        claiming = false;
        observation.end(claim.takeover ? 'takeover' : 'acquired');
        if (claim.takeover) this.observer.takeover(input.scope, input.key);
        return fn(tx, view, claim);
      });
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

  // Hot path: docs/hot-path.md#engine-store-calls
  /**
   * Makes one store call, observed as `operation`; `result` tells the observer how it ended. Not an `async`
   * function: it chains once onto the store's own promise, where an `async` wrapper would cost every store
   * call one more promise and hop.
   */
  private call<T>(operation: StoreOperation, call: () => Promise<T>, result: (value: T) => StoreCallResult): Promise<T> {
    const observation = this.observer.storeCall(operation);
    let pending: Promise<T>;
    try {
      pending = Promise.resolve(call());
    } catch (error) {
      observation.fail(error);
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the store's own throw, passed on as it came, as an `async` function would
      return Promise.reject(error);
    }
    return pending.then(
      (value) => {
        observation.end(result(value));
        return value;
      },
      (error: unknown) => {
        observation.fail(error);
        throw error;
      },
    );
  }

  /** The claim input of `id`, with a fresh owner token for this attempt. */
  private claimInput(id: OperationId): ClaimInput {
    return claimInputOf(id, this.options, this.options.generateId());
  }

  /**
   * Keeps the record this receiver just completed in the replay cache (when there is one), so the first
   * retry is answered from it too. Its times are this receiver's: claimed at `claimedAt`, completed now,
   * retained `retentionMs` from now. A takeover's record is left out: its first claim's time is not known
   * here.
   */
  private rememberCompleted(claim: Claim, response: StoredResponse, claimedAt: number): void {
    if (this.replays === undefined || claim.takeover) return;
    const now = this.options.clock.now();
    this.replays.remember(
      {
        scope: claim.scope,
        key: claim.key,
        fingerprint: claim.fingerprint,
        state: 'completed',
        leaseToken: claim.leaseToken,
        leaseExpiresAt: claim.leaseExpiresAt,
        // Its own copy: the work's response object goes back to the caller, who may change or reuse it.
        response: frozenResponse(response),
        createdAt: claimedAt,
        completedAt: now,
        expiresAt: now + this.options.retentionMs,
      },
      now,
    );
  }

  /** The answer to a claim lost to `record`, which the store returned (and the replay cache keeps if completed). */
  private lost(id: OperationId, request: RequestRun<Tx>, record: IdempotencyRecord): Execution | Promise<Execution> {
    this.replays?.remember(record, this.options.clock.now());
    return this.answer(id, request, record);
  }

  /** The answer to `record` standing in the way: a replay, a reused key (422), or a request in flight. */
  private answer(id: OperationId, request: RequestRun<Tx>, record: IdempotencyRecord): Execution | Promise<Execution> {
    // Mismatch is checked before in-flight: a reused key is an error however it stands.
    if (record.fingerprint !== id.fingerprint) throw new IdempotencyKeyReusedError(record);
    if (record.state === 'completed' && record.response) return { response: record.response, replayed: true, saved: true };
    return this.inFlight(id, request, record);
  }

  /** Waits until the record changes state (completed, released, lease expired) or `timeoutMs` passes. */
  private async waitForChange(id: OperationId, timeoutMs: number): Promise<IdempotencyRecord | undefined> {
    const store = this.store;
    try {
      const waitFor = store.waitFor?.bind(store);
      if (waitFor) return await this.call('wait_for', () => waitFor(id.scope, id.key, timeoutMs), NO_RESULT);
      const get = (): Promise<IdempotencyRecord | undefined> => this.call('get', () => store.get(id.scope, id.key), NO_RESULT);
      let record = await get();
      for (let waited = 0; waited < timeoutMs; waited += this.options.pollIntervalMs) {
        if (record?.state !== 'in_progress' || record.leaseExpiresAt <= this.options.clock.now()) break;
        await new Promise((resolve) => setTimeout(resolve, Math.min(this.options.pollIntervalMs, timeoutMs - waited)));
        record = await get();
      }
      return record;
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }
}

/** How a request that ended with `error` (not the work's own throw) is reported. */
function outcomeOf(error: unknown): RequestOutcome {
  if (error instanceof IdempotencyKeyReusedError) return 'mismatch';
  if (error instanceof RequestInProgressError) return 'in_flight_rejected';
  if (error instanceof LeaseLostError) return 'lease_lost';
  if (error instanceof StoreUnavailableError) return 'store_unavailable';
  return 'released_after_error';
}

/** A plain claim's answer as its store call's result. */
function claimResult(input: ClaimInput, result: ClaimResult): StoreCallResult {
  if (result.acquired) return result.claim.takeover ? 'takeover' : 'acquired';
  return lostResult(input, result.record);
}

/** A lost claim's answer, by the record that stood in the way. */
function lostResult(input: ClaimInput, record: IdempotencyRecord): StoreCallResult {
  if (record.fingerprint !== input.fingerprint) return 'mismatch';
  return record.state === 'completed' ? 'replay' : 'in_flight';
}
