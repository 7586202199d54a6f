/**
 * Trace context through messages: the outbox saves the enqueuing span's context with a row's headers, the
 * relay publishes those headers with the message, and the inbox reads them back. Both ends go through the
 * global propagator of `@opentelemetry/api` (`propagation.inject` / `propagation.extract`), so they write
 * and read whatever the application registered: W3C Trace Context (`traceparent`, and `tracestate` when
 * set; https://www.w3.org/TR/trace-context/) with the SDK's default setup. Without a propagator registered
 * (no SDK) both are no-ops.
 *
 * @module
 */
import type { Context, SpanContext, TextMapGetter } from '@opentelemetry/api';
import { otel } from './api.js';

/** Message headers as retrysafe carries them: names to string values. */
export type HeaderRecord = Readonly<Record<string, string>>;

/**
 * The propagation headers of the active context, e.g. `{ traceparent: '00-<trace id>-<span id>-01' }`;
 * `{}` when no span is active, no propagator is registered or `@opentelemetry/api` is not installed.
 */
export function traceHeaders(): Record<string, string> {
  const carrier: Record<string, string> = {};
  if (otel !== undefined) otel.propagation.inject(otel.context.active(), carrier);
  return carrier;
}

/**
 * Reads header names case-insensitively: brokers keep the case a publisher chose, HTTP lowercases it, and
 * propagators ask for lower-case names (`traceparent`).
 */
const headerGetter: TextMapGetter<HeaderRecord> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => {
    const exact = carrier[key];
    if (exact !== undefined) return exact;
    const wanted = key.toLowerCase();
    for (const name of Object.keys(carrier)) if (name.toLowerCase() === wanted) return carrier[name];
    return undefined;
  },
};

/** The context a message was created in, read from its headers. */
interface CreationContext {
  /**
   * The active context with the message's remote span in place of the active span (and whatever else the
   * propagator read, such as baggage): the parent for a span that continues the message's trace.
   */
  readonly context: Context;
  /** The remote span's context: the span that was active when the message was enqueued. */
  readonly spanContext: SpanContext;
}

/**
 * Extracts the creation context from message headers with the global propagator; `undefined` when they
 * carry no valid span context (or no propagator is registered).
 */
export function creationContext(headers: HeaderRecord): CreationContext | undefined {
  if (otel === undefined) return undefined;
  const active = otel.context.active();
  const context = otel.propagation.extract(active, headers, headerGetter);
  // A propagator that found no span context leaves the active span in place.
  const span = otel.trace.getSpan(context);
  if (span === undefined || span === otel.trace.getSpan(active)) return undefined;
  const spanContext = span.spanContext();
  return otel.isSpanContextValid(spanContext) ? { context, spanContext } : undefined;
}
