/**
 * The receiver's OpenTelemetry observer: turns what the engine reports (see `ReceiverObserver` in the core)
 * into the receiver's metrics, spans and log lines. `createReceiver` builds one per receiver.
 *
 * @module
 */
import { performance } from 'node:perf_hooks';
import type { Span } from '@opentelemetry/api';
import type {
  Observation,
  ReceiverObserver,
  RequestOutcome,
  StoreCallObservation,
  StoreCallResult,
  StoreOperation,
} from '../core/observer.js';
import { telemetryThrew } from './api.js';
import { keyHash, logEvent, type Logger } from './logging.js';
import { ReceiverMetrics, type MetricsOptions } from './metrics.js';
import { endFailed, ReceiverTraces, RECEIVER_SPANS, type TracesOptions } from './traces.js';

/** The receiver's observability options (all optional; without them metrics and spans go to the global API). */
export interface ObservabilityOptions extends MetricsOptions, TracesOptions {
  /**
   * Gets one line per notable outcome (mismatch, lease lost, takeover, store unavailable, completion given up,
   * shouldPersist threw). A logger that throws is ignored: the line is lost, the request goes on as without it.
   * @defaultValue none
   */
  readonly logger?: Logger | undefined;
}

/** The span of each store operation; `get` (the poll of `wait` mode on a store without `waitFor`) has none. */
const STORE_SPANS: Readonly<Record<StoreOperation, string | undefined>> = Object.freeze({
  claim: RECEIVER_SPANS.claim,
  complete: RECEIVER_SPANS.complete,
  release: RECEIVER_SPANS.release,
  renew: undefined,
  wait_for: RECEIVER_SPANS.wait,
  get: undefined,
  reap: undefined,
  ping: undefined,
});

/** A store call with no span and no timing. */
const UNREPORTED_CALL: StoreCallObservation = Object.freeze({ end: () => undefined, fail: () => undefined });

/**
 * Reports a receiver's requests as OpenTelemetry metrics and spans, and its notable outcomes to a logger.
 * Never throws (the `ReceiverObserver` contract): a throw from the user's telemetry — a span processor's
 * `onStart` or `onEnd`, a meter provider's instruments — goes to the API's `diag.error` and is otherwise
 * ignored (that span or recording is lost: `ReceiverMetrics` and `ReceiverTraces.start` catch what they
 * call, this class what ending a span calls), and a throwing logger is ignored.
 */
export class TelemetryObserver implements ReceiverObserver {
  /** @internal */
  readonly metrics: ReceiverMetrics;
  /** @internal */
  readonly traces: ReceiverTraces;
  private readonly logger: Logger | undefined;

  /** @param storeKind - the `store` attribute: the store's `kind`, or `custom` */
  constructor(options: ObservabilityOptions, storeKind: string) {
    this.metrics = new ReceiverMetrics(options, storeKind);
    this.traces = new ReceiverTraces(options);
    this.logger = options.logger;
  }

  request(scope: string, key: string): Observation {
    this.metrics.begin();
    return new RequestObservation(this, scope, key, this.traces.start(RECEIVER_SPANS.execute));
  }

  storeCall(operation: StoreOperation): StoreCallObservation {
    const spanName = STORE_SPANS[operation];
    const span = spanName === undefined ? undefined : this.traces.start(spanName);
    // Hot path: docs/hot-path.md#observation-that-allocates-nothing
    // Neither timed (the memory store's calls are not) nor traced: nothing to report, nothing to allocate.
    if (span === undefined && !this.metrics.timesStore) return UNREPORTED_CALL;
    return new StoreCallReport(this.metrics.timesStore ? this.metrics : undefined, operation, span);
  }

  takeover(scope: string, key: string): void {
    this.metrics.takeover();
    logEvent(this.logger, 'takeover', { keyHash: keyHash(scope, key), store: this.metrics.storeKind });
  }

  completionAbandoned(scope: string, key: string): void {
    this.metrics.abandoned();
    logEvent(this.logger, 'completion_given_up', { keyHash: keyHash(scope, key), store: this.metrics.storeKind });
  }

  shouldPersistThrew(scope: string, key: string, error: unknown): void {
    logEvent(this.logger, 'should_persist_threw', { keyHash: keyHash(scope, key), store: this.metrics.storeKind, err: error });
  }

  invalidKey(): void {
    this.metrics.begin();
    this.metrics.request('invalid_key', '');
  }

  /** @internal Counts the request, and logs the notable outcomes. */
  ended(outcome: RequestOutcome, scope: string, key: string): void {
    this.metrics.request(outcome, scope);
    if (outcome === 'mismatch' || outcome === 'lease_lost' || outcome === 'store_unavailable') {
      logEvent(this.logger, outcome, { keyHash: keyHash(scope, key), store: this.metrics.storeKind });
    }
  }
}

class RequestObservation implements Observation {
  private workStartedAt = 0;

  constructor(
    private readonly observer: TelemetryObserver,
    private readonly scope: string,
    private readonly key: string,
    private readonly span: Span | undefined,
  ) {}

  within<T>(fn: () => T): T {
    return this.span === undefined ? fn() : this.observer.traces.within(this.span, fn);
  }

  workStarted(): void {
    this.workStartedAt = performance.now();
    this.observer.metrics.inFlight(1);
  }

  workEnded(threw: boolean): void {
    const metrics = this.observer.metrics;
    metrics.handler(threw ? 'released_after_error' : 'executed', (performance.now() - this.workStartedAt) / 1000, this.scope);
    metrics.inFlight(-1);
  }

  end(outcome: RequestOutcome, error?: unknown): void {
    this.observer.ended(outcome, this.scope, this.key);
    const span = this.span;
    if (span === undefined) return;
    try {
      span.setAttribute('retrysafe.outcome', outcome);
      if (outcome === 'released_after_error' || outcome === 'store_unavailable') endFailed(span, error);
      else span.end();
    } catch (failure) {
      telemetryThrew(failure);
    }
  }
}

class StoreCallReport implements StoreCallObservation {
  /** When the call started; read only when it is timed. */
  private readonly started: number;

  /** @param metrics - where the call's duration goes; `undefined` when the store's calls are not timed (no clock read) */
  constructor(
    private readonly metrics: ReceiverMetrics | undefined,
    private readonly operation: StoreOperation,
    private readonly span: Span | undefined,
  ) {
    this.started = metrics === undefined ? 0 : performance.now();
  }

  end(result: StoreCallResult): void {
    this.metrics?.store(this.operation, (performance.now() - this.started) / 1000, false);
    const span = this.span;
    if (span === undefined) return;
    try {
      if (typeof result === 'string') {
        const acquired = result === 'acquired' || result === 'takeover';
        span.setAttribute('retrysafe.claim.result', acquired ? 'acquired' : result);
        if (acquired) span.setAttribute('retrysafe.takeover', result === 'takeover');
      } else if (typeof result === 'boolean') {
        span.setAttribute(this.operation === 'complete' ? 'retrysafe.saved' : 'retrysafe.released', result);
      }
      span.end();
    } catch (failure) {
      telemetryThrew(failure);
    }
  }

  fail(error: unknown): void {
    this.metrics?.store(this.operation, (performance.now() - this.started) / 1000, true);
    try {
      endFailed(this.span, error);
    } catch (failure) {
      telemetryThrew(failure);
    }
  }
}
