/**
 * The messaging side's observability without a broker: the trace context `outbox.enqueue` saves with a
 * row, the inbox's `retrysafe.inbox.process` span continuing it (parent, or nested with a link), outcomes
 * on spans and instruments, and the dead-letter log line through a real pino instance with the message id
 * hashed. The inbox runs on SQLite in memory; the outbox's insert goes to a recording connection.
 */
import { context, metrics, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createInbox, createSqliteInboxStore, INBOX_INSTRUMENTS, INBOX_SPANS, type InboxStore } from '../../src/messaging/inbox/index.js';
import { createOutbox, type Queryable } from '../../src/messaging/outbox/index.js';
import { INSTRUMENTATION_SCOPE, keyHash } from '../../src/index.js';
import { capturingLogger, telemetry, type Telemetry } from '../support/telemetry.js';
import type { Database } from 'better-sqlite3';

beforeAll(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
});
afterAll(() => {
  propagation.disable();
  context.disable();
});

/** A connection that records the outbox's insert instead of running it; `headers()` reads the row's headers. */
function recordingConnection(): { tx: Queryable; headers: () => Record<string, string> } {
  const inserts: unknown[][] = [];
  const tx = {
    query: (_text: string, values: unknown[] = []) => {
      inserts.push(values);
      return Promise.resolve({ rows: [], rowCount: 1 });
    },
  } as unknown as Queryable;
  return { tx, headers: () => JSON.parse(String(inserts.at(-1)?.[3])) as Record<string, string> };
}

describe('trace context through the outbox and the inbox', () => {
  let t: Telemetry;
  beforeEach(() => {
    t = telemetry();
  });
  afterEach(async () => {
    await t.shutdown();
  });

  const spansNamed = (name: string): ReadableSpan[] => t.spans.getFinishedSpans().filter((s) => s.name === name);
  const newInbox = () => createInbox({ store: createSqliteInboxStore(), tracerProvider: t.tracerProvider, meter: t.meterProvider.getMeter('retrysafe') });

  it('saves the enqueuing span’s traceparent and tracestate with the row; the caller’s own header wins; none outside a span', async () => {
    const outbox = createOutbox({ schema: 'app' });
    const { tx, headers } = recordingConnection();
    const tracer = t.tracerProvider.getTracer('test');
    // A span whose trace carries vendor state, as one continued from an upstream request would.
    const upstream = propagation.extract(ROOT_CONTEXT, { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', tracestate: 'vendor=opaque' });
    const enqueuing = await tracer.startActiveSpan('place order', {}, upstream, async (span) => {
      await outbox.enqueue(tx, { topic: 'orders', key: 'o-1', payload: '{}', headers: { 'x-tenant': 'a' } });
      span.end();
      return span.spanContext();
    });
    expect(headers()).toEqual({
      'x-tenant': 'a',
      traceparent: `00-0af7651916cd43dd8448eb211c80319c-${enqueuing.spanId}-01`,
      tracestate: 'vendor=opaque',
    });

    await tracer.startActiveSpan('another', async (span) => {
      await outbox.enqueue(tx, { topic: 'orders', key: 'o-2', payload: '{}', headers: { traceparent: '00-11111111111111111111111111111111-2222222222222222-01' } });
      span.end();
    });
    expect(headers()).toEqual({ traceparent: '00-11111111111111111111111111111111-2222222222222222-01' });

    await outbox.enqueue(tx, { topic: 'orders', key: 'o-3', payload: '{}' });
    expect(headers()).toEqual({});
  });

  it('makes the enqueuing span the parent of the inbox’s process span, and runs the handler inside it', async () => {
    const outbox = createOutbox({ schema: 'app' });
    const { tx, headers } = recordingConnection();
    const tracer = t.tracerProvider.getTracer('test');
    const enqueuing = await tracer.startActiveSpan('place order', async (span) => {
      await outbox.enqueue(tx, { topic: 'orders', key: 'o-1', payload: '{}' });
      span.end();
      return span.spanContext();
    });
    const inbox = newInbox();
    // Broker adapters keep a header's case (AMQP, Kafka): the inbox reads it regardless.
    const delivered = { TraceParent: headers()['traceparent'] ?? '' };
    await inbox.handle({ consumer: 'billing', messageId: 'm-1', headers: delivered }, () => {
      tracer.startSpan('charge card').end();
      return Promise.resolve();
    });
    const [processSpan] = spansNamed(INBOX_SPANS.process);
    expect(processSpan?.spanContext().traceId).toBe(enqueuing.traceId);
    expect(processSpan?.parentSpanContext?.spanId).toBe(enqueuing.spanId);
    expect(processSpan?.parentSpanContext?.isRemote).toBe(true);
    expect(processSpan?.links).toEqual([]);
    expect(processSpan?.kind).toBe(SpanKind.CONSUMER);
    expect(processSpan?.instrumentationScope.name).toBe(INSTRUMENTATION_SCOPE);
    expect(processSpan?.attributes).toEqual({
      'messaging.operation.type': 'process',
      'messaging.consumer.group.name': 'billing',
      'retrysafe.message_id.hash': keyHash('billing', 'm-1'),
      'retrysafe.outcome': 'processed',
      'retrysafe.attempt': 1,
    });
    expect(spansNamed('charge card')[0]?.parentSpanContext?.spanId).toBe(processSpan?.spanContext().spanId);
  });

  it('nests under an active span of the message’s trace and links the creation context; without trace headers, under the active span', async () => {
    const tracer = t.tracerProvider.getTracer('test');
    const creation = tracer.startSpan('place order');
    creation.end();
    const headers: Record<string, string> = {};
    propagation.inject(trace.setSpan(ROOT_CONTEXT, creation), headers);
    const inbox = newInbox();

    // An instrumented HTTP server continued the trace from the webhook's headers before the inbox ran.
    const server = await tracer.startActiveSpan('POST /hooks', {}, propagation.extract(ROOT_CONTEXT, headers), async (span) => {
      await inbox.handle({ consumer: 'hooks', messageId: 'm-1', headers }, () => Promise.resolve());
      span.end();
      return span.spanContext();
    });
    const unrelated = await tracer.startActiveSpan('poll', async (span) => {
      await inbox.handle({ consumer: 'hooks', messageId: 'm-2', headers: {} }, () => Promise.resolve());
      span.end();
      return span.spanContext();
    });

    const [nested, plain] = spansNamed(INBOX_SPANS.process);
    expect(nested?.parentSpanContext?.spanId).toBe(server.spanId);
    expect(nested?.links.map((l) => l.context.spanId)).toEqual([creation.spanContext().spanId]);
    expect(plain?.parentSpanContext?.spanId).toBe(unrelated.spanId);
    expect(plain?.links).toEqual([]);
  });

  it('reports each outcome on the span and the instruments, and logs a dead letter once with its id hashed', async () => {
    const { logger, lines, raw } = capturingLogger();
    const store = createSqliteInboxStore();
    const inbox = createInbox({ store, maxAttempts: 2, logger, tracerProvider: t.tracerProvider, meter: t.meterProvider.getMeter('retrysafe') });
    const secret = 'order-4711-card-4242';
    const ok = () => Promise.resolve();
    const declined = () => Promise.reject(new Error('card declined'));

    await inbox.handle({ consumer: 'billing', messageId: 'ok-1' }, ok);
    await inbox.handle({ consumer: 'billing', messageId: 'ok-1' }, ok);
    await inbox.handle({ consumer: 'billing', messageId: secret }, declined);
    await inbox.handle({ consumer: 'billing', messageId: secret }, declined);
    // Found dead-lettered: no new dead letter, no second line.
    await inbox.handle({ consumer: 'billing', messageId: secret }, declined);
    await expect(inbox.handle({ consumer: 'billing', messageId: '' }, ok)).rejects.toThrow(/no usable id/);
    const down = Object.assign(Object.create(store) as InboxStore<Database>, { begin: () => Promise.reject(new Error('disk gone')) });
    const failing = createInbox({ store: down, tracerProvider: t.tracerProvider, meter: t.meterProvider.getMeter('retrysafe') });
    await expect(failing.handle({ consumer: 'billing', messageId: 'ok-2' }, ok)).rejects.toThrow('disk gone');

    const spans = spansNamed(INBOX_SPANS.process);
    expect(spans.map((s) => [s.attributes['retrysafe.outcome'], s.attributes['retrysafe.attempt'], s.status.code])).toEqual([
      ['processed', 1, SpanStatusCode.UNSET],
      ['duplicate', undefined, SpanStatusCode.UNSET],
      ['retry', 1, SpanStatusCode.ERROR],
      ['dead_lettered', 2, SpanStatusCode.ERROR],
      ['dead_lettered', undefined, SpanStatusCode.UNSET],
      ['rejected', undefined, SpanStatusCode.ERROR],
      ['store_unavailable', undefined, SpanStatusCode.ERROR],
    ]);
    expect(spans[3]?.events.map((e) => e.attributes?.['exception.message'])).toEqual(['card declined']);

    const I = INBOX_INSTRUMENTS;
    const counted = async (outcome: string) => [await t.sum(I.messages, { outcome, consumer: 'billing' }), await t.count(I.processDuration, { outcome, consumer: 'billing' })];
    expect(await counted('processed')).toEqual([1, 1]);
    expect(await counted('duplicate')).toEqual([1, 1]);
    expect(await counted('retry')).toEqual([1, 1]);
    expect(await counted('dead_lettered')).toEqual([1, 1]);
    expect(await counted('rejected')).toEqual([1, 0]);
    expect(await counted('store_unavailable')).toEqual([1, 1]);
    const metrics = await t.metrics();
    expect([I.messages, I.processDuration].map((name) => metrics.get(name)?.descriptor.unit)).toEqual(['{message}', 's']);

    expect(lines).toEqual([
      {
        level: 50,
        time: expect.any(Number) as number,
        pid: process.pid,
        hostname: expect.any(String) as string,
        event: 'dead_letter',
        consumer: 'billing',
        messageIdHash: keyHash('billing', secret),
        reason: 'Error: card declined',
        attempts: 2,
        msg: 'retrysafe: message dead-lettered',
      },
    ]);
    expect(raw.join('').includes(secret)).toBe(false);
  });

  it('records to a global meter provider registered after its first delivery, from the next delivery on', async () => {
    const inbox = createInbox({ store: createSqliteInboxStore(), tracerProvider: t.tracerProvider });
    const ok = () => Promise.resolve();
    await inbox.handle({ consumer: 'billing', messageId: 'before' }, ok);
    metrics.setGlobalMeterProvider(t.meterProvider);
    try {
      await inbox.handle({ consumer: 'billing', messageId: 'after' }, ok);
      await inbox.handle({ consumer: 'billing', messageId: 'after' }, ok);
      const I = INBOX_INSTRUMENTS;
      expect(await t.sum(I.messages, { outcome: 'processed', consumer: 'billing' })).toBe(1);
      expect(await t.sum(I.messages, { outcome: 'duplicate', consumer: 'billing' })).toBe(1);
      expect(await t.count(I.processDuration, { consumer: 'billing' })).toBe(2);
    } finally {
      metrics.disable();
    }
  });
});
