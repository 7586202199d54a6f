/**
 * The receiver's OpenTelemetry instruments (`@opentelemetry/api`): without an SDK registered (or a
 * `meterProvider` given) the API's no-op meter records nothing and costs a few calls per request; without
 * the API installed nothing is recorded at all.
 *
 * Naming follows the OpenTelemetry semantic conventions: dotted lower-case names under `retrysafe.`,
 * durations as histograms in seconds (unit `s`, like `http.server.request.duration`), counts with a
 * curly-brace annotation unit (`{request}`). Attributes are bounded: `outcome`, `operation` and `store`
 * take values from fixed lists; the idempotency key is never an attribute, and the scope only when it is
 * on the `metricScopes` allow-list (as `retrysafe.scope`).
 *
 * @module
 */
import type { Attributes, Counter, Histogram, MeterProvider, ObservableCallback } from '@opentelemetry/api';
import type { RequestOutcome, StoreOperation } from '../core/observer.js';
import { otel } from './api.js';
import { INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION } from './scope.js';

/** Instrument names of the receiver. */
export const RECEIVER_INSTRUMENTS = Object.freeze({
  /**
   * Asynchronous (observable) counter, `{request}`; attributes `outcome` (a `RequestOutcome`),
   * `retrysafe.scope` (allow-listed only). Counted in a plain map and reported at each collection.
   */
  requests: 'retrysafe.requests',
  /** Histogram, `s`: the work (handler) from its start to its response or throw; attribute `outcome`. */
  handlerDuration: 'retrysafe.handler.duration',
  /** Histogram, `s`: one store call; attributes `operation` (a `StoreOperation`), `store`, `error` (`true` when it failed). */
  storeDuration: 'retrysafe.store.operation.duration',
  /**
   * Asynchronous (observable) UpDownCounter, `{request}`: works running now under a lease this process
   * holds. Kept as a plain number and reported at each collection, so a request costs no SDK call for it.
   */
  inFlight: 'retrysafe.requests.in_flight',
  /** Counter, `{takeover}`: claims that took over a record whose lease had expired (a crashed or slow holder). */
  takeovers: 'retrysafe.lease.takeovers',
  /** Counter, `{record}`: expired records deleted by the reaper (`retrysafe reap`); attribute `store`. */
  reaped: 'retrysafe.records.reaped',
});

/** Where the receiver's instruments come from, and which scopes may be attributes. */
export interface MetricsOptions {
  /**
   * @defaultValue the global provider (`metrics.getMeterProvider()`), read again as each request starts:
   * an SDK registered after the receiver served traffic is recorded to from the next request on
   */
  readonly meterProvider?: MeterProvider | undefined;
  /** Scopes recorded as the `retrysafe.scope` attribute; every other scope is left out. @defaultValue none */
  readonly metricScopes?: readonly string[] | undefined;
}

/**
 * The receiver's instruments. Without a `meterProvider` option they follow the global provider: it is read
 * as each request starts ({@link ReceiverMetrics.begin}), because the API's global meter provider has no
 * proxy (unlike its tracer provider) and a meter obtained from the no-op provider stays no-op. The request
 * counts and the in-flight number are kept here, so a provider registered later reports them since the
 * receiver was created; its histograms hold the durations recorded from then on.
 */
export class ReceiverMetrics {
  /** The provider the instruments were made on; `undefined` when there is none (no API installed). */
  private provider: MeterProvider | undefined;
  /** `undefined` while nothing is to be recorded to (before the first request, or no API installed). */
  private instruments: Instruments | undefined;
  private running = 0;
  private readonly scopes: ReadonlySet<string>;
  /** Attribute objects are shared, one per value, so recording allocates nothing. */
  private readonly outcomeAttributes = new Map<string, Attributes>();
  /** Requests by their attribute object, reported by the observable counter. */
  private readonly requestCounts = new Map<Attributes, number>();
  private readonly storeAttributes = new Map<string, Attributes>();

  constructor(
    private readonly options: MetricsOptions,
    /** The `store` attribute: `memory`, `sqlite`, `postgres`, `redis` or `custom`. */
    readonly storeKind: string,
  ) {
    this.scopes = new Set(options.metricScopes ?? []);
  }

  /**
   * Called as each request starts (and before each count outside one): makes the instruments on the
   * provider to record to, when it is not the one they were made on. One read of the global per request;
   * the recordings between two reads go to the instruments of the first.
   */
  begin(): void {
    const provider = this.options.meterProvider ?? otel?.metrics.getMeterProvider();
    if (provider === this.provider) return;
    this.instruments?.detach();
    this.provider = provider;
    this.instruments = provider && createInstruments(provider, () => this.running, this.requestCounts);
  }

  request(outcome: RequestOutcome, scope: string): void {
    const attributes = this.outcome(outcome, scope);
    this.requestCounts.set(attributes, (this.requestCounts.get(attributes) ?? 0) + 1);
  }

  handler(outcome: RequestOutcome, seconds: number, scope: string): void {
    this.instruments?.handlerDuration.record(seconds, this.outcome(outcome, scope));
  }

  store(operation: StoreOperation, seconds: number, failed: boolean): void {
    const name = failed ? `${operation}!` : operation;
    let attributes = this.storeAttributes.get(name);
    if (attributes === undefined) {
      attributes = Object.freeze({ operation, store: this.storeKind, ...(failed && { error: true }) });
      this.storeAttributes.set(name, attributes);
    }
    this.instruments?.storeDuration.record(seconds, attributes);
  }

  inFlight(delta: 1 | -1): void {
    this.running += delta;
  }

  takeover(): void {
    this.instruments?.takeovers.add(1);
  }

  reaped(count: number): void {
    this.begin();
    this.instruments?.reaped.add(count, { store: this.storeKind });
  }

  private outcome(outcome: RequestOutcome, scope: string): Attributes {
    const named = this.scopes.has(scope);
    const name = named ? `${outcome}\n${scope}` : outcome;
    let attributes = this.outcomeAttributes.get(name);
    if (attributes === undefined) {
      attributes = Object.freeze(named ? { outcome, 'retrysafe.scope': scope } : { outcome });
      this.outcomeAttributes.set(name, attributes);
    }
    return attributes;
  }
}

interface Instruments {
  readonly handlerDuration: Histogram;
  readonly storeDuration: Histogram;
  readonly takeovers: Counter;
  readonly reaped: Counter;
  /** Takes the observable instruments' callbacks off their provider (one no longer recorded to). */
  detach(): void;
}

function createInstruments(
  provider: MeterProvider,
  running: () => number,
  requests: ReadonlyMap<Attributes, number>,
): Instruments {
  const meter = provider.getMeter(INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION);
  const n = RECEIVER_INSTRUMENTS;
  const inFlight = meter.createObservableUpDownCounter(n.inFlight, { description: 'Works running under a lease held by this process', unit: '{request}' });
  const observeInFlight: ObservableCallback = (result) => result.observe(running());
  inFlight.addCallback(observeInFlight);
  const counted = meter.createObservableCounter(n.requests, { description: 'Requests through the idempotency receiver, by outcome', unit: '{request}' });
  const observeCounted: ObservableCallback = (result) => {
    for (const [attributes, count] of requests) result.observe(count, attributes);
  };
  counted.addCallback(observeCounted);
  return {
    handlerDuration: meter.createHistogram(n.handlerDuration, { description: 'Duration of the work behind an idempotency key', unit: 's' }),
    storeDuration: meter.createHistogram(n.storeDuration, { description: 'Duration of one idempotency store operation', unit: 's' }),
    takeovers: meter.createCounter(n.takeovers, { description: 'Claims that took over an expired lease', unit: '{takeover}' }),
    reaped: meter.createCounter(n.reaped, { description: 'Expired idempotency records deleted by the reaper', unit: '{record}' }),
    detach() {
      inFlight.removeCallback(observeInFlight);
      counted.removeCallback(observeCounted);
    },
  };
}
