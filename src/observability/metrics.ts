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
import type { Attributes, Counter, Histogram, MeterProvider } from '@opentelemetry/api';
import type { RequestOutcome, StoreOperation } from '../core/observer.js';
import { otel } from './api.js';

/** Name and version of the instrumentation scope every retrysafe meter and tracer is obtained under. */
export const INSTRUMENTATION_SCOPE = 'retrysafe';
/** The package version reported with the instrumentation scope. */
export const INSTRUMENTATION_VERSION = '0.1.0';

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
  /** @defaultValue the global provider (`metrics.getMeterProvider()`), read on first use */
  readonly meterProvider?: MeterProvider | undefined;
  /** Scopes recorded as the `retrysafe.scope` attribute; every other scope is left out. @defaultValue none */
  readonly metricScopes?: readonly string[] | undefined;
}

/** The receiver's instruments, created on first use so a provider registered after the receiver is seen. */
export class ReceiverMetrics {
  /** `null` once it is known there is nothing to record to (no provider given, no API installed). */
  private instruments: Instruments | null | undefined;
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

  request(outcome: RequestOutcome, scope: string): void {
    if (this.instruments === undefined) this.get();
    const attributes = this.outcome(outcome, scope);
    this.requestCounts.set(attributes, (this.requestCounts.get(attributes) ?? 0) + 1);
  }

  handler(outcome: RequestOutcome, seconds: number, scope: string): void {
    this.get()?.handlerDuration.record(seconds, this.outcome(outcome, scope));
  }

  store(operation: StoreOperation, seconds: number, failed: boolean): void {
    const name = failed ? `${operation}!` : operation;
    let attributes = this.storeAttributes.get(name);
    if (attributes === undefined) {
      attributes = Object.freeze({ operation, store: this.storeKind, ...(failed && { error: true }) });
      this.storeAttributes.set(name, attributes);
    }
    this.get()?.storeDuration.record(seconds, attributes);
  }

  inFlight(delta: 1 | -1): void {
    // The observable counter is registered with the other instruments, on first use.
    if (this.instruments === undefined) this.get();
    this.running += delta;
  }

  takeover(): void {
    this.get()?.takeovers.add(1);
  }

  reaped(count: number): void {
    this.get()?.reaped.add(count, { store: this.storeKind });
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

  private get(): Instruments | null {
    if (this.instruments === undefined) {
      const provider = this.options.meterProvider ?? otel?.metrics.getMeterProvider();
      this.instruments = provider ? createInstruments(provider, () => this.running, this.requestCounts) : null;
    }
    return this.instruments;
  }
}

interface Instruments {
  readonly handlerDuration: Histogram;
  readonly storeDuration: Histogram;
  readonly takeovers: Counter;
  readonly reaped: Counter;
}

function createInstruments(
  provider: MeterProvider,
  running: () => number,
  requests: ReadonlyMap<Attributes, number>,
): Instruments {
  const meter = provider.getMeter(INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION);
  const n = RECEIVER_INSTRUMENTS;
  meter
    .createObservableUpDownCounter(n.inFlight, { description: 'Works running under a lease held by this process', unit: '{request}' })
    .addCallback((result) => result.observe(running()));
  meter
    .createObservableCounter(n.requests, { description: 'Requests through the idempotency receiver, by outcome', unit: '{request}' })
    .addCallback((result) => {
      for (const [attributes, count] of requests) result.observe(count, attributes);
    });
  return {
    handlerDuration: meter.createHistogram(n.handlerDuration, { description: 'Duration of the work behind an idempotency key', unit: 's' }),
    storeDuration: meter.createHistogram(n.storeDuration, { description: 'Duration of one idempotency store operation', unit: 's' }),
    takeovers: meter.createCounter(n.takeovers, { description: 'Claims that took over an expired lease', unit: '{takeover}' }),
    reaped: meter.createCounter(n.reaped, { description: 'Expired idempotency records deleted by the reaper', unit: '{record}' }),
  };
}
