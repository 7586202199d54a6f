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
import type { Attributes, Counter, Histogram, Meter, MeterProvider, ObservableCallback } from '@opentelemetry/api';
import type { RequestOutcome, StoreOperation } from '../core/observer.js';
import { telemetryThrew } from './api.js';
import { MeterSource } from './meter-source.js';

/** Instrument names of the receiver. */
export const RECEIVER_INSTRUMENTS = Object.freeze({
  /**
   * Asynchronous (observable) counter, `{request}`; attributes `outcome` (a `RequestOutcome`),
   * `retrysafe.scope` (allow-listed only). Counted in a plain map and reported at each collection.
   */
  requests: 'retrysafe.requests',
  /** Histogram, `s`: the work (handler) from its start to its response or throw; attribute `outcome`. */
  handlerDuration: 'retrysafe.handler.duration',
  /**
   * Histogram, `s`: one store call; attributes `operation` (a `StoreOperation`), `store`, `error` (`true`
   * when it failed). Not recorded for the memory store (`store` `memory`): its calls are map operations
   * in this process, a histogram of them would time the clock, and each recording costs more than the
   * call it times.
   */
  storeDuration: 'retrysafe.store.operation.duration',
  /**
   * Asynchronous (observable) UpDownCounter, `{request}`: works running now under a lease this process
   * holds. Kept as a plain number and reported at each collection, so a request costs no SDK call for it.
   */
  inFlight: 'retrysafe.requests.in_flight',
  /** Counter, `{takeover}`: claims that took over a record whose lease had expired (a crashed or slow holder). */
  takeovers: 'retrysafe.lease.takeovers',
  /**
   * Counter, `{completion}`: plain-mode completions given up after `completionRetryMs` of store errors (the
   * response went out unsaved; a retry after the lease runs the work again); attribute `store`.
   */
  abandoned: 'retrysafe.completions.abandoned',
  /** Counter, `{record}`: expired records deleted by the reaper (`retrysafe reap`); attribute `store`. */
  reaped: 'retrysafe.records.reaped',
});

/** Where the receiver's instruments come from, and which scopes may be attributes. */
export interface MetricsOptions {
  /**
   * Where the instruments are made. A throw from its meter or instruments never changes a request's outcome:
   * it goes to the API's `diag.error`, and that recording is lost.
   * @defaultValue the global provider (`metrics.getMeterProvider()`), read again as each request starts:
   * an SDK registered after the receiver served traffic is recorded to from the next request on
   */
  readonly meterProvider?: MeterProvider | undefined;
  /** Scopes recorded as the `retrysafe.scope` attribute; every other scope is left out. @defaultValue none */
  readonly metricScopes?: readonly string[] | undefined;
}

/**
 * The request counts and the in-flight number that the observable instruments report: one tally for every
 * receiver that follows the global provider, one per `meterProvider` given. Receivers recording to one
 * provider share a tally because the SDK keeps, per attribute set, the last value an instrument's callbacks
 * observed: receivers that each observed their own counts would hide each other's. Every callback on a
 * provider observes the whole tally, so whichever runs last reports the sum.
 */
interface Tally {
  running: number;
  /** By attribute name (`outcome`, or `outcome` and scope). */
  readonly requests: Map<string, TallyEntry>;
}

// Hot path: docs/hot-path.md#observation-that-allocates-nothing
/** One attribute set of `retrysafe.requests`: its attribute object, shared so recording allocates nothing, and its count. */
interface TallyEntry {
  readonly attributes: Attributes;
  count: number;
}

const globalTally: Tally = { running: 0, requests: new Map() };
const providerTallies = new WeakMap<MeterProvider, Tally>();

function tallyOf(provider: MeterProvider | undefined): Tally {
  if (provider === undefined) return globalTally;
  let tally = providerTallies.get(provider);
  if (tally === undefined) {
    tally = { running: 0, requests: new Map() };
    providerTallies.set(provider, tally);
  }
  return tally;
}

/**
 * The receiver's instruments. Without a `meterProvider` option they follow the global provider through a
 * {@link MeterSource}, read as each request starts ({@link ReceiverMetrics.begin}). The request counts and
 * the in-flight number are kept in a {@link Tally} shared with the other receivers on the same provider, so
 * a provider registered later reports them since the receivers were created; its histograms hold the
 * durations recorded from then on.
 */
export class ReceiverMetrics {
  private readonly source: MeterSource<Instruments>;
  /** `undefined` while nothing is to be recorded to (before the first request, or no API installed). */
  private instruments: Instruments | undefined;
  private readonly tally: Tally;
  private readonly scopes: ReadonlySet<string>;
  private readonly storeAttributes = new Map<string, Attributes>();
  /**
   * Whether store calls are timed: every store but the memory store (see `RECEIVER_INSTRUMENTS.storeDuration`).
   * The observer reads it as each store call starts, so an untimed call costs no clock read.
   */
  readonly timesStore: boolean;

  constructor(
    options: MetricsOptions,
    /** The `store` attribute: `memory`, `sqlite`, `postgres`, `redis` or `custom`. */
    readonly storeKind: string,
  ) {
    this.scopes = new Set(options.metricScopes ?? []);
    this.timesStore = storeKind !== 'memory';
    const tally = tallyOf(options.meterProvider);
    this.tally = tally;
    this.source = new MeterSource(
      options.meterProvider,
      (meter) => createInstruments(meter, tally),
      (old) => old.detach(),
    );
  }

  /**
   * Called as each request starts (and before each count outside one): takes the instruments of the
   * provider to record to ({@link MeterSource.instruments}: made again, the old ones' observable callbacks
   * detached, when the provider changed). One read of the global per request; the recordings between two
   * reads go to the instruments of the first.
   */
  begin(): void {
    try {
      this.instruments = this.source.instruments();
    } catch (error) {
      // A provider whose meter or instruments throw records nothing: the request goes on without them.
      this.instruments = undefined;
      telemetryThrew(error);
    }
  }

  request(outcome: RequestOutcome, scope: string): void {
    this.outcome(outcome, scope).count++;
  }

  handler(outcome: RequestOutcome, seconds: number, scope: string): void {
    try {
      this.instruments?.handlerDuration.record(seconds, this.outcome(outcome, scope).attributes);
    } catch (error) {
      telemetryThrew(error);
    }
  }

  /** Records one store call's duration; called only when {@link ReceiverMetrics.timesStore}. */
  store(operation: StoreOperation, seconds: number, failed: boolean): void {
    const name = failed ? `${operation}!` : operation;
    let attributes = this.storeAttributes.get(name);
    if (attributes === undefined) {
      attributes = Object.freeze({ operation, store: this.storeKind, ...(failed && { error: true }) });
      this.storeAttributes.set(name, attributes);
    }
    try {
      this.instruments?.storeDuration.record(seconds, attributes);
    } catch (error) {
      telemetryThrew(error);
    }
  }

  inFlight(delta: 1 | -1): void {
    this.tally.running += delta;
  }

  takeover(): void {
    try {
      this.instruments?.takeovers.add(1);
    } catch (error) {
      telemetryThrew(error);
    }
  }

  abandoned(): void {
    try {
      this.instruments?.abandoned.add(1, { store: this.storeKind });
    } catch (error) {
      telemetryThrew(error);
    }
  }

  reaped(count: number): void {
    this.begin();
    try {
      this.instruments?.reaped.add(count, { store: this.storeKind });
    } catch (error) {
      telemetryThrew(error);
    }
  }

  /** The tally's entry of an outcome (and of the scope, when allow-listed); made on first use. */
  private outcome(outcome: RequestOutcome, scope: string): TallyEntry {
    const named = this.scopes.has(scope);
    const name = named ? `${outcome}\n${scope}` : outcome;
    let entry = this.tally.requests.get(name);
    if (entry === undefined) {
      entry = { attributes: Object.freeze(named ? { outcome, 'retrysafe.scope': scope } : { outcome }), count: 0 };
      this.tally.requests.set(name, entry);
    }
    return entry;
  }
}

interface Instruments {
  readonly handlerDuration: Histogram;
  readonly storeDuration: Histogram;
  readonly takeovers: Counter;
  readonly abandoned: Counter;
  readonly reaped: Counter;
  /** Takes the observable instruments' callbacks off their provider (one no longer recorded to). */
  detach(): void;
}

function createInstruments(meter: Meter, tally: Tally): Instruments {
  const n = RECEIVER_INSTRUMENTS;
  const inFlight = meter.createObservableUpDownCounter(n.inFlight, { description: 'Works running under a lease held by this process', unit: '{request}' });
  const observeInFlight: ObservableCallback = (result) => result.observe(tally.running);
  inFlight.addCallback(observeInFlight);
  const counted = meter.createObservableCounter(n.requests, { description: 'Requests through the idempotency receiver, by outcome', unit: '{request}' });
  const observeCounted: ObservableCallback = (result) => {
    for (const { attributes, count } of tally.requests.values()) result.observe(count, attributes);
  };
  counted.addCallback(observeCounted);
  return {
    handlerDuration: meter.createHistogram(n.handlerDuration, { description: 'Duration of the work behind an idempotency key', unit: 's' }),
    storeDuration: meter.createHistogram(n.storeDuration, { description: 'Duration of one idempotency store operation', unit: 's' }),
    takeovers: meter.createCounter(n.takeovers, { description: 'Claims that took over an expired lease', unit: '{takeover}' }),
    abandoned: meter.createCounter(n.abandoned, { description: 'Completions given up after completionRetryMs of store errors', unit: '{completion}' }),
    reaped: meter.createCounter(n.reaped, { description: 'Expired idempotency records deleted by the reaper', unit: '{record}' }),
    detach() {
      inFlight.removeCallback(observeInFlight);
      counted.removeCallback(observeCounted);
    },
  };
}
