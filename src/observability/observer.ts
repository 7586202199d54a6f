/**
 * Where the receiver reports: one {@link Observation} per request (outcome counter, span, log line) and a
 * timed view of the store (store-operation histogram, claim/complete/release spans, takeovers). The engine
 * calls it at a handful of points and knows nothing of metrics, spans or loggers.
 *
 * @module
 */
import { performance } from 'node:perf_hooks';
import type { Span } from '@opentelemetry/api';
import {
  IdempotencyKeyReusedError,
  LeaseLostError,
  RequestInProgressError,
  StoreUnavailableError,
} from '../core/errors.js';
import type { Claim, IdempotencyRecord, StoredResponse } from '../core/record.js';
import type {
  ClaimedTransaction,
  ClaimInput,
  ClaimResult,
  IdempotencyStore,
  TransactionalStore,
  TransactionView,
} from '../core/store.js';
import { keyHash, logEvent, type Logger } from './logging.js';
import { ReceiverMetrics, type MetricsOptions, type RequestOutcome, type StoreOperation } from './metrics.js';
import { endFailed, ReceiverTraces, RECEIVER_SPANS, type TracesOptions } from './traces.js';

/** The receiver's observability options (all optional; without them metrics and spans go to the global API). */
export interface ObservabilityOptions extends MetricsOptions, TracesOptions {
  /** Gets one line per notable outcome (mismatch, lease lost, takeover, store unavailable). @defaultValue none */
  readonly logger?: Logger | undefined;
}

/** One request's report; the engine marks what only it knows (a wait, the work's own throw). */
export interface Observation {
  /** The engine is about to wait for the original (`inFlight: 'wait'`). */
  waiting(): void;
  /** Wraps the work so its duration is measured and its own throw told apart from the receiver's. */
  work<A, R>(fn: (arg: A) => Promise<R>): (arg: A) => Promise<R>;
  /** Runs `fn` under the request's span. */
  within<T>(fn: () => Promise<T>): Promise<T>;
  /** The request ended with a response (`replayed`: a saved one). */
  end(replayed: boolean): void;
  /** The request ended with `error`. */
  fail(error: unknown): void;
}

/** The receiver's side of observability. */
export class ReceiverObserver {
  readonly metrics: ReceiverMetrics;
  private readonly traces: ReceiverTraces;
  private readonly logger: Logger | undefined;

  constructor(options: ObservabilityOptions, store: IdempotencyStore) {
    this.metrics = new ReceiverMetrics(options, store.kind ?? 'custom');
    this.traces = new ReceiverTraces(options);
    this.logger = options.logger;
  }

  /** Starts one request's observation. */
  start(scope: string, key: string): Observation {
    return new RequestObservation(this, scope, key, this.traces.start(RECEIVER_SPANS.execute));
  }

  /** Counts a request the HTTP adapter answered before the receiver (a missing or malformed key). */
  invalidKey(): void {
    this.metrics.request('invalid_key', '');
  }

  /** @internal */
  finish(observation: RequestObservation, outcome: RequestOutcome): void {
    this.metrics.request(outcome, observation.scope);
    if (outcome === 'mismatch' || outcome === 'lease_lost' || outcome === 'store_unavailable') {
      logEvent(this.logger, outcome, { keyHash: keyHash(observation.scope, observation.key), store: this.metrics.storeKind });
    }
  }

  /** @internal */
  traceSpan(name: string): Span | undefined {
    return this.traces.start(name);
  }

  /** @internal */
  within<T>(span: Span | undefined, fn: () => Promise<T>): Promise<T> {
    return this.traces.within(span, fn);
  }

  /**
   * A view of `store` whose claim, complete, release, get and waitFor are timed and traced; every other
   * member is the store's own.
   */
  timed(store: IdempotencyStore): IdempotencyStore {
    return new TimedStore(store, this);
  }

  /**
   * The store's `claimTransaction`, with its claim timed and traced as `claim` (from the call to the
   * transaction's start, or to the record that stood in the way) and the view's complete and release as
   * the plain store's are.
   */
  async claimTransaction<Tx, R>(
    store: TransactionalStore<Tx>,
    input: ClaimInput,
    fn: (tx: Tx, view: TransactionView, claim: Claim) => Promise<R>,
  ): Promise<ClaimedTransaction<R>> {
    const span = this.traces.start(RECEIVER_SPANS.claim);
    const started = performance.now();
    let claiming = true;
    const claimed = (result: string, takeover: boolean | undefined, error?: unknown): void => {
      claiming = false;
      this.metrics.store('claim', (performance.now() - started) / 1000, error !== undefined);
      if (error !== undefined) {
        endFailed(span, error);
        return;
      }
      if (span === undefined) return;
      span.setAttribute('retrysafe.claim.result', result);
      if (takeover !== undefined) span.setAttribute('retrysafe.takeover', takeover);
      span.end();
    };
    try {
      const outcome = await store.claimTransaction(input, (tx, view, claim) => {
        claimed('acquired', claim.takeover);
        if (claim.takeover) this.takeover(input);
        return fn(tx, new TimedView(view, this), claim);
      });
      if (!outcome.acquired) claimed(claimResult(input, outcome), undefined);
      return outcome;
    } catch (error) {
      if (claiming) claimed('', undefined, error);
      throw error;
    }
  }

  /** @internal */
  takeover(input: ClaimInput): void {
    this.metrics.takeover();
    logEvent(this.logger, 'takeover', { keyHash: keyHash(input.scope, input.key), store: this.metrics.storeKind });
  }
}

class RequestObservation implements Observation {
  private waited = false;
  private workError: unknown = undefined;
  private workThrew = false;

  constructor(
    private readonly observer: ReceiverObserver,
    readonly scope: string,
    readonly key: string,
    private readonly span: Span | undefined,
  ) {}

  waiting(): void {
    this.waited = true;
  }

  work<A, R>(fn: (arg: A) => Promise<R>): (arg: A) => Promise<R> {
    return async (arg) => {
      const metrics = this.observer.metrics;
      const started = performance.now();
      metrics.inFlight(1);
      try {
        const result = await fn(arg);
        metrics.handler('executed', (performance.now() - started) / 1000, this.scope);
        return result;
      } catch (error) {
        this.workThrew = true;
        this.workError = error;
        metrics.handler('released_after_error', (performance.now() - started) / 1000, this.scope);
        throw error;
      } finally {
        metrics.inFlight(-1);
      }
    };
  }

  within<T>(fn: () => Promise<T>): Promise<T> {
    return this.observer.within(this.span, fn);
  }

  end(replayed: boolean): void {
    const outcome: RequestOutcome = replayed ? (this.waited ? 'waited' : 'replayed') : 'executed';
    this.observer.finish(this, outcome);
    this.span?.setAttribute('retrysafe.outcome', outcome);
    this.span?.end();
  }

  fail(error: unknown): void {
    const outcome = this.classify(error);
    this.observer.finish(this, outcome);
    this.span?.setAttribute('retrysafe.outcome', outcome);
    if (outcome === 'released_after_error' || outcome === 'store_unavailable') endFailed(this.span, error);
    else this.span?.end();
  }

  private classify(error: unknown): RequestOutcome {
    // The work's own throw is the work's, whatever its class (a handler may call another receiver).
    if (this.workThrew && error === this.workError) return 'released_after_error';
    if (error instanceof IdempotencyKeyReusedError) return 'mismatch';
    if (error instanceof RequestInProgressError) return 'in_flight_rejected';
    if (error instanceof LeaseLostError) return 'lease_lost';
    if (error instanceof StoreUnavailableError) return 'store_unavailable';
    return 'released_after_error';
  }
}

/** Claim results as the `retrysafe.claim.result` span attribute. */
function claimResult(input: ClaimInput, result: ClaimResult | ClaimedTransaction<unknown>): string {
  if (result.acquired) return 'acquired';
  if (result.record.fingerprint !== input.fingerprint) return 'mismatch';
  return result.record.state === 'completed' ? 'replay' : 'in_flight';
}

class TimedStore implements IdempotencyStore {
  readonly waitFor?: (scope: string, key: string, timeoutMs: number) => Promise<IdempotencyRecord | undefined>;

  constructor(
    private readonly store: IdempotencyStore,
    private readonly observer: ReceiverObserver,
  ) {
    const waitFor = store.waitFor?.bind(store);
    if (waitFor !== undefined) {
      this.waitFor = (scope, key, timeoutMs) => timeCall(this.observer, 'wait_for', RECEIVER_SPANS.wait, () => waitFor(scope, key, timeoutMs));
    }
  }

  async claim(input: ClaimInput): Promise<ClaimResult> {
    const result = await timeCall(this.observer, 'claim', RECEIVER_SPANS.claim, () => this.store.claim(input), (span, value) => {
      span.setAttribute('retrysafe.claim.result', claimResult(input, value));
      if (value.acquired) span.setAttribute('retrysafe.takeover', value.claim.takeover);
    });
    if (result.acquired && result.claim.takeover) this.observer.takeover(input);
    return result;
  }

  complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return timeCall(this.observer, 'complete', RECEIVER_SPANS.complete, () => this.store.complete(claim, response, retentionMs), (span, saved) => {
      span.setAttribute('retrysafe.saved', saved);
    });
  }

  release(claim: Claim): Promise<boolean> {
    return timeCall(this.observer, 'release', RECEIVER_SPANS.release, () => this.store.release(claim), (span, released) => {
      span.setAttribute('retrysafe.released', released);
    });
  }

  get(scope: string, key: string): Promise<IdempotencyRecord | undefined> {
    return timeCall(this.observer, 'get', undefined, () => this.store.get(scope, key));
  }

  reap(limit: number): Promise<number> {
    return this.store.reap(limit);
  }

  close(): Promise<void> {
    return this.store.close();
  }


}

/** A transaction's view whose complete and release are timed and traced like the store's. */
class TimedView implements TransactionView {
  constructor(
    private readonly view: TransactionView,
    private readonly observer: ReceiverObserver,
  ) {}

  complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return timeCall(this.observer, 'complete', RECEIVER_SPANS.complete, () => this.view.complete(claim, response, retentionMs), (span, saved) => {
      span.setAttribute('retrysafe.saved', saved);
    });
  }

  release(claim: Claim): Promise<boolean> {
    return timeCall(this.observer, 'release', RECEIVER_SPANS.release, () => this.view.release(claim), (span, released) => {
      span.setAttribute('retrysafe.released', released);
    });
  }

  checkpoint(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined> {
    return this.view.checkpoint(claim, recoveryPoint, leaseMs);
  }
}

/** Times and traces one store call. */
async function timeCall<T>(
observer: ReceiverObserver,
  operation: StoreOperation,
  spanName: string | undefined,
  call: () => Promise<T>,
  annotate?: (span: Span, value: T) => void,
): Promise<T> {
  const span = spanName === undefined ? undefined : observer.traceSpan(spanName);
  const started = performance.now();
  try {
    const value = await call();
    observer.metrics.store(operation, (performance.now() - started) / 1000, false);
    if (span) {
      annotate?.(span, value);
      span.end();
    }
    return value;
  } catch (error) {
    observer.metrics.store(operation, (performance.now() - started) / 1000, true);
    if (span) endFailed(span, error);
    throw error;
  }
}
