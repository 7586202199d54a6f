/**
 * The session receiver's OpenTelemetry instruments (`@opentelemetry/api`): without an SDK registered (or a
 * `meterProvider` given) the API's no-op meter records nothing.
 *
 * Naming follows the receiver's (`retrysafe.*`, the OpenTelemetry semantic conventions): requests by an
 * `outcome` attribute, durations as histograms in seconds (unit `s`). Attributes are bounded: `outcome`
 * takes values from a fixed list; the client id and request number are never attributes.
 *
 * @module
 */
import type { Attributes, Counter, Histogram, Meter, MeterProvider } from '@opentelemetry/api';
import { MeterSource } from '../observability/meter-source.js';

/**
 * How one `apply` ended (the `outcome` attribute of `retrysafe.sessions.requests`):
 * - `executed`: the work ran and its value was saved for replay;
 * - `replayed`: the saved value of an earlier execution was answered without running the work;
 * - `not_saved`: the work ran, but the store failed to save its value (answered with `saved: false`);
 * - `stale`: the request number is at or below the session's low-water mark (`StaleRequestError`, 409);
 * - `in_flight_rejected`: another delivery is applying the number now (`SessionRequestInProgressError`, 409);
 * - `lease_lost`: the work ran but its hold on the number was taken over; not saved (`SessionLeaseLostError`, 409);
 * - `released_after_error`: the work threw; the number was released for a retry;
 * - `session_unknown`: no such session (`SessionUnknownError`, 404);
 * - `session_expired`: the session's lease ran out (`SessionExpiredError`, 410);
 * - `invalid_request`: malformed session fields (`SessionRequestInvalidError`, 400);
 * - `store_unavailable`: the store failed before the work ran (`StoreUnavailableError`, 503);
 * - `error`: anything else threw (a value `JSON.stringify` cannot encode, a throwing `generateId`).
 */
export type SessionOutcome =
  | 'executed'
  | 'replayed'
  | 'not_saved'
  | 'stale'
  | 'in_flight_rejected'
  | 'lease_lost'
  | 'released_after_error'
  | 'session_unknown'
  | 'session_expired'
  | 'invalid_request'
  | 'store_unavailable'
  | 'error';

/** Instrument names of the session receiver. */
export const SESSION_INSTRUMENTS = Object.freeze({
  /** Counter, `{request}`: `apply` calls by `outcome` (a {@link SessionOutcome}). */
  requests: 'retrysafe.sessions.requests',
  /** Histogram, `s`: the work from its start to its value or throw; attribute `outcome` (`executed` or `released_after_error`). */
  handlerDuration: 'retrysafe.sessions.handler.duration',
  /** Counter, `{takeover}`: executions that took a request number over from a holder whose execution lease expired. */
  takeovers: 'retrysafe.sessions.takeovers',
  /** Counter, `{session}`: sessions opened by `register`. */
  registered: 'retrysafe.sessions.registered',
  /** Counter, `{session}`: expired sessions deleted by `reap`. */
  reaped: 'retrysafe.sessions.reaped',
});

interface Instruments {
  readonly requests: Counter;
  readonly handlerDuration: Histogram;
  readonly takeovers: Counter;
  readonly registered: Counter;
  readonly reaped: Counter;
}

/**
 * The session receiver's instruments, on the provider to record to now ({@link MeterSource}), so a provider
 * registered after the receiver is seen from its next recording on.
 */
export class SessionMetrics {
  private readonly source: MeterSource<Instruments>;
  /** Attribute objects are shared, one per outcome, so recording allocates nothing. */
  private readonly outcomes = new Map<SessionOutcome, Attributes>();

  constructor(
    /** @defaultValue the global provider (`metrics.getMeterProvider()`), read at each recording */
    meterProvider: MeterProvider | undefined,
  ) {
    this.source = new MeterSource(meterProvider, createInstruments);
  }

  request(outcome: SessionOutcome): void {
    this.source.instruments()?.requests.add(1, this.attributes(outcome));
  }

  /** Records one run of the work, `seconds` long. */
  handler(outcome: 'executed' | 'released_after_error', seconds: number): void {
    this.source.instruments()?.handlerDuration.record(seconds, this.attributes(outcome));
  }

  takeover(): void {
    this.source.instruments()?.takeovers.add(1);
  }

  registered(): void {
    this.source.instruments()?.registered.add(1);
  }

  reaped(count: number): void {
    if (count > 0) this.source.instruments()?.reaped.add(count);
  }

  private attributes(outcome: SessionOutcome): Attributes {
    let attributes = this.outcomes.get(outcome);
    if (attributes === undefined) {
      attributes = Object.freeze({ outcome });
      this.outcomes.set(outcome, attributes);
    }
    return attributes;
  }

}

function createInstruments(meter: Meter): Instruments {
  const n = SESSION_INSTRUMENTS;
  return {
    requests: meter.createCounter(n.requests, { description: 'Session requests by outcome', unit: '{request}' }),
    handlerDuration: meter.createHistogram(n.handlerDuration, { description: 'The work of one session request', unit: 's' }),
    takeovers: meter.createCounter(n.takeovers, { description: 'Request numbers taken over from an expired execution lease', unit: '{takeover}' }),
    registered: meter.createCounter(n.registered, { description: 'Sessions registered', unit: '{session}' }),
    reaped: meter.createCounter(n.reaped, { description: 'Expired sessions deleted by the reaper', unit: '{session}' }),
  };
}
