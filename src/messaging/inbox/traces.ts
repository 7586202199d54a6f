/**
 * The inbox's span: one `retrysafe.inbox.process` span (kind CONSUMER) per delivery, continuing the trace
 * the message was enqueued in. The outbox saved the enqueuing span's context in the message's headers
 * (`traceparent`); every broker adapter hands those headers to the inbox, and a webhook endpoint passes the
 * request's. The handler runs inside the span, so its own spans (and the trace context of messages it
 * enqueues) nest under it.
 *
 * Parent or link: the OpenTelemetry messaging conventions ask for a link from a "process" span to the
 * message's creation context, and allow that context as the parent when one message is processed at a
 * time (https://opentelemetry.io/docs/specs/semconv/messaging/messaging-spans/). The inbox handles exactly
 * one message per call, so the creation context is the parent, and the trace reads producer to consumer as
 * one tree. One exception: when the active span already belongs to the message's trace (an instrumented
 * HTTP server or broker client continued it from the same headers), the span nests under that one and
 * links the creation context instead.
 *
 * @module
 */
import type { Context, Link, Span, Tracer, TracerProvider } from '@opentelemetry/api';
import { otel } from '../../observability/api.js';
import { keyHash } from '../../observability/logging.js';
import { INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION } from '../../observability/scope.js';
import { creationContext, type HeaderRecord } from '../../observability/propagation.js';
import { endFailed } from '../../observability/traces.js';
import type { InboxMessageOutcome } from './metrics.js';

/** Span names of the inbox. */
export const INBOX_SPANS = Object.freeze({
  /**
   * One delivery through `inbox.handle` (kind CONSUMER). Attributes: `messaging.operation.type` (`process`),
   * `messaging.consumer.group.name` (the consumer), `retrysafe.message_id.hash` (16 hex digits of SHA-256
   * over the consumer, a NUL and the message id, as the log lines carry it; never the id itself),
   * `retrysafe.outcome` (an `InboxMessageOutcome`) and `retrysafe.attempt` (when an attempt was counted).
   * Status ERROR with an exception event for `retry`, `dead_lettered` (when dead-lettered now),
   * `rejected` and `store_unavailable`.
   */
  process: 'retrysafe.inbox.process',
});

/** A delivery's span and the context its handler runs in. */
export interface DeliverySpan {
  readonly span: Span;
  readonly context: Context;
}

/** Starts the inbox's spans on a tracer obtained on first use. */
export class InboxTraces {
  private tracer: Tracer | undefined;

  constructor(
    /** @defaultValue the global provider (`trace.getTracerProvider()`), read on first use */
    private readonly provider: TracerProvider | undefined,
  ) {}

  /** Starts the span of a delivery to `consumer` under the trace its headers carry (see the module notes). */
  start(consumer: string, messageId: unknown, headers: HeaderRecord): DeliverySpan | undefined {
    if (otel === undefined) return undefined;
    this.tracer ??= (this.provider ?? otel.trace.getTracerProvider()).getTracer(INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION);
    const active = otel.context.active();
    const creation = creationContext(headers);
    const ambient = otel.trace.getSpanContext(active);
    const nested = creation === undefined || ambient?.traceId === creation.spanContext.traceId;
    const parent = nested ? active : creation.context;
    const links: Link[] = creation !== undefined && nested && ambient?.spanId !== creation.spanContext.spanId ? [{ context: creation.spanContext }] : [];
    const span = this.tracer.startSpan(
      INBOX_SPANS.process,
      {
        kind: otel.SpanKind.CONSUMER,
        attributes: { 'messaging.operation.type': 'process', 'messaging.consumer.group.name': consumer },
        links,
      },
      parent,
    );
    if (span.isRecording() && typeof messageId === 'string') span.setAttribute('retrysafe.message_id.hash', keyHash(consumer, messageId));
    return { span, context: otel.trace.setSpan(parent, span) };
  }

  /** Runs `fn` inside the delivery's span (as the active span). */
  within<T>(delivery: DeliverySpan | undefined, fn: () => T): T {
    if (delivery === undefined || otel === undefined) return fn();
    return otel.context.with(delivery.context, fn);
  }

  /** Ends the delivery's span with its outcome; `failure`, when given, marks it failed by its error. */
  end(delivery: DeliverySpan | undefined, outcome: InboxMessageOutcome, attempts: number | undefined, failure?: { readonly error: unknown }): void {
    if (delivery === undefined) return;
    const { span } = delivery;
    span.setAttribute('retrysafe.outcome', outcome);
    if (attempts !== undefined) span.setAttribute('retrysafe.attempt', attempts);
    if (failure === undefined) span.end();
    else endFailed(span, failure.error);
  }
}
