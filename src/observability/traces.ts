/**
 * The receiver's spans (`@opentelemetry/api`; non-recording unless an SDK's tracer provider is registered
 * or given). One `retrysafe.execute` span per request, a child of the request's active span (the HTTP
 * server span of an instrumented framework), carries the outcome; the work runs inside it, so the
 * handler's own spans nest under it. Each store call the receiver makes is a child span:
 * `retrysafe.claim` (with the claim's result), `retrysafe.complete`, `retrysafe.release`, `retrysafe.wait`.
 *
 * @module
 */
import type { Context, Span, SpanOptions, Tracer, TracerProvider } from '@opentelemetry/api';
import { otel, telemetryThrew, traceApi } from './api.js';
import { INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION } from './scope.js';

/** Span names of the receiver. */
export const RECEIVER_SPANS = Object.freeze({
  /** One request through the receiver; attributes `retrysafe.outcome`, `retrysafe.scope` (allow-listed only). */
  execute: 'retrysafe.execute',
  /** The claim; attributes `retrysafe.claim.result` (`acquired`, `replay`, `in_flight`, `mismatch`), `retrysafe.takeover`. */
  claim: 'retrysafe.claim',
  /** Saving the response; attribute `retrysafe.saved` (`false` when fenced off: the lease was lost). */
  complete: 'retrysafe.complete',
  /** Releasing the key after a failed work or a response not to be saved; attribute `retrysafe.released`. */
  release: 'retrysafe.release',
  /** A duplicate waiting for the original (`inFlight: 'wait'`). */
  wait: 'retrysafe.wait',
});

/** Where the receiver's spans go. */
export interface TracesOptions {
  /**
   * Where the spans are started. A throw from it (e.g. a span processor's `onStart` or `onEnd`) never
   * changes a request's outcome: it goes to the API's `diag.error`, and that span is lost.
   * @defaultValue the global provider (`trace.getTracerProvider()`), read on first use
   */
  readonly tracerProvider?: TracerProvider | undefined;
}

/** The options of every span the receiver starts: one object, not one per span. */
const SPAN_OPTIONS: SpanOptions = Object.freeze(otel === undefined ? {} : { kind: otel.SpanKind.INTERNAL });

/** Starts the receiver's spans on a tracer obtained on first use. */
export class ReceiverTraces {
  private tracer: Tracer | undefined;

  constructor(private readonly options: TracesOptions) {}

  /**
   * Starts a span under the active one (or `parent`); `undefined` when the API is not installed, when the
   * provider throws (reported to `diag.error`), or when the span does not record (no SDK registered, or
   * sampled out): such a span would carry nothing, so nothing is set on it, ended or made active. The global provider is asked at each call (the API's
   * proxy), so an SDK registered after the receiver was created is used from then on; while that proxy has
   * no SDK's provider behind it, no span is started at all.
   */
  start(name: string, parent?: Context): Span | undefined {
    if (otel === undefined || traceApi === undefined) return undefined;
    try {
      if (this.tracer === undefined) {
        const provider = this.options.tracerProvider ?? traceApi.getTracerProvider();
        // Hot path: docs/hot-path.md#fastify-memory-path
        // The API's global proxy without a delegate (no SDK registered) makes only non-recording spans.
        if (this.options.tracerProvider === undefined && !delegates(provider)) return undefined;
        this.tracer = provider.getTracer(INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION);
      }
      const span = this.tracer.startSpan(name, SPAN_OPTIONS, parent ?? otel.context.active());
      return span.isRecording() ? span : undefined;
    } catch (error) {
      // A provider that throws (a span processor's onStart, say) starts no span: the request goes on without it.
      telemetryThrew(error);
      return undefined;
    }
  }

  /** Runs `fn` with `span` as the active span, so spans started inside are its children. */
  within<T>(span: Span | undefined, fn: () => T): T {
    if (span === undefined || otel === undefined) return fn();
    return otel.context.with(otel.trace.setSpan(otel.context.active(), span), fn);
  }
}

/** Ends `span` as failed by `error` (recorded as an exception event). */
export function endFailed(span: Span | undefined, error: unknown): void {
  if (span === undefined) return;
  if (span.isRecording() && otel !== undefined) {
    span.recordException(error instanceof Error ? error : String(error));
    span.setStatus({ code: otel.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
  }
  span.end();
}

/** The API's global provider: a proxy that hands out an SDK's tracers once one is registered. */
interface DelegatingProvider {
  getDelegateTracer?(name: string, version?: string): Tracer | undefined;
}

/** Whether `provider` is not the API's proxy, or is one with an SDK's provider behind it. */
function delegates(provider: TracerProvider): boolean {
  const proxy = provider as DelegatingProvider;
  return typeof proxy.getDelegateTracer !== 'function' || proxy.getDelegateTracer(INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION) !== undefined;
}
