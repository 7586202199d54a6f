/**
 * What the receiver reports, and the contract of whoever listens. The engine calls a
 * {@link ReceiverObserver} at a handful of points — a request starts and ends (with its
 * {@link RequestOutcome}), the work starts and ends, a store call starts and ends, a claim takes over a
 * lease — and knows nothing of metrics, spans or loggers. `createReceiver` (the package's entry point)
 * plugs in the OpenTelemetry observer; {@link SILENT_OBSERVER} reports nothing.
 *
 * @module
 */

/**
 * How one request through the receiver ended (the `outcome` attribute of `retrysafe.requests`):
 * - `executed`: the work ran to a response (saved for replay, or released as `shouldPersist` decided);
 * - `replayed`: a saved response was replayed without running the work;
 * - `waited`: a duplicate waited for the original (`inFlight: 'wait'`) and replayed its response;
 * - `in_flight_rejected`: a duplicate of a running request was refused (409);
 * - `mismatch`: the key was reused with another fingerprint (422);
 * - `invalid_key`: an HTTP adapter refused a missing (when required) or malformed Idempotency-Key (400);
 * - `store_unavailable`: the store failed before the work ran (503);
 * - `lease_lost`: the work ran but its lease had been taken over, so its response was not saved (409);
 * - `released_after_error`: the work threw; the key was released for a retry.
 */
export type RequestOutcome =
  | 'executed'
  | 'replayed'
  | 'waited'
  | 'in_flight_rejected'
  | 'mismatch'
  | 'invalid_key'
  | 'store_unavailable'
  | 'lease_lost'
  | 'released_after_error';

/** A store operation the receiver times (the `operation` attribute of `retrysafe.store.operation.duration`). */
export type StoreOperation = 'claim' | 'complete' | 'release' | 'renew' | 'get' | 'wait_for' | 'reap' | 'ping';

/**
 * How a store call ended, as its observation is told:
 * - a claim: `acquired` (won, fresh or resumed), `takeover` (won by taking over an expired lease),
 *   `replay` (a completed record stands), `in_flight` (a live lease stands), `mismatch` (the record carries
 *   another fingerprint);
 * - `complete`, `release` and `renew`: whether the call took effect (`false`: fenced off, the lease was lost);
 * - `get` and `wait_for`: `undefined`.
 */
export type StoreCallResult = 'acquired' | 'takeover' | 'replay' | 'in_flight' | 'mismatch' | boolean | undefined;

/** One request's observation, started by {@link ReceiverObserver.request}; the engine calls `end` exactly once. */
export interface Observation {
  /**
   * Runs the request's store calls and work inside the observation (for OpenTelemetry: with the request's
   * span active, so spans started inside are its children); returns (or throws) what `fn` does, a value
   * or a promise.
   */
  within<T>(fn: () => T): T;
  /** The work starts under a won claim (a request may run it at most once). */
  workStarted(): void;
  /** The work ended: it returned a response (`threw: false`) or threw. */
  workEnded(threw: boolean): void;
  /** The request ended with `outcome`; `error` is the error it ends with, when it ends with one. */
  end(outcome: RequestOutcome, error?: unknown): void;
}

/** One store call's observation, started by {@link ReceiverObserver.storeCall}; ends once, by `end` or `fail`. */
export interface StoreCallObservation {
  /** The call resolved; `result` tells how (see {@link StoreCallResult}). */
  end(result: StoreCallResult): void;
  /** The call rejected with `error`. */
  fail(error: unknown): void;
}

/**
 * Where the receiver reports. Implementations must not throw: an observer never changes a request's
 * outcome (the OpenTelemetry observer of `createReceiver` catches what the user's tracer provider, meter
 * provider and logger throw). One that throws anyway while plain mode holds a won claim ends the request
 * with its throw, and its lease is no longer kept alive nor released: it runs out as a crashed holder's
 * would, and a retry after `leaseMs` takes the key over (and runs the work again, unless it was saved).
 */
export interface ReceiverObserver {
  /** A request starts through `Receiver.execute` (or `run`) under (scope, key). */
  request(scope: string, key: string): Observation;
  /** A store call the receiver makes starts (within the request's observation). */
  storeCall(operation: StoreOperation): StoreCallObservation;
  /** A claim under (scope, key) took over a record whose lease had expired (its holder crashed or outran it). */
  takeover(scope: string, key: string): void;
  /**
   * Plain mode gave up completing under (scope, key): the work ran, its response goes out unsaved
   * (`saved: false`), and every try of `complete` for `completionRetryMs` failed with a store error. The
   * record stays in progress until its lease ends; a retry after that runs the work again.
   */
  completionAbandoned(scope: string, key: string): void;
  /**
   * The `shouldPersist` option threw `error` when asked about the response of the work under (scope, key).
   * The work ran, so the response is saved as if `shouldPersist` had returned `true` and sent as usual;
   * the request does not end with `error`.
   */
  shouldPersistThrew(scope: string, key: string, error: unknown): void;
  /** An HTTP adapter answered a request before the receiver: a missing (when required) or malformed key (400). */
  invalidKey(): void;
}

const SILENT_CALL: StoreCallObservation = Object.freeze({
  end: () => undefined,
  fail: () => undefined,
});

const SILENT_REQUEST: Observation = Object.freeze({
  within: <T>(fn: () => T): T => fn(),
  workStarted: () => undefined,
  workEnded: () => undefined,
  end: () => undefined,
});

/** An observer that reports nothing. */
export const SILENT_OBSERVER: ReceiverObserver = Object.freeze({
  request: () => SILENT_REQUEST,
  storeCall: () => SILENT_CALL,
  takeover: () => undefined,
  completionAbandoned: () => undefined,
  shouldPersistThrew: () => undefined,
  invalidKey: () => undefined,
});
