/**
 * One trace from producer to consumer, through the real brokers: a span around `outbox.enqueue` on
 * PostgreSQL, the relay publishing over RabbitMQ, NATS JetStream, a webhook and Kafka (librdkafka's mock
 * cluster), and the consumer's inbox, whose `retrysafe.inbox.process` span must be that span's child, with
 * the handler's own spans under it.
 */
import { randomUUID } from 'node:crypto';
import { context, propagation, type SpanContext } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import amqp from 'amqplib';
import { AckPolicy, connect, nanos, StorageType } from 'nats';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createInbox, createPostgresInboxStore, inboxProcessor, INBOX_SPANS, type Inbox, type MessageHandler } from '../../src/messaging/inbox/index.js';
import { createOutbox, createRelay, type OutboxPublisher, type Relay } from '../../src/messaging/outbox/index.js';
import { createAmqpPublisher, startAmqpConsumer } from '../../src/messaging/transports/amqp.js';
import { createKafkaPublisher, KAFKA_MESSAGE_ID_HEADER, startKafkaConsumer } from '../../src/messaging/transports/kafka.js';
import { createNatsPublisher, startNatsConsumer } from '../../src/messaging/transports/nats.js';
import { createWebhookPublisher } from '../../src/messaging/transports/webhook.js';
import { keyHash } from '../../src/index.js';
import { startMockKafkaCluster } from '../support/kafka.js';
import { createEffectsSchema, type EffectsSchema } from '../support/messaging.js';
import { outboxBacklog, startWebhookReceiver, waitUntil, WEBHOOK_SECRET } from '../support/outbox.js';
import { postgresAvailable } from '../support/postgres-schema.js';
import { AMQP_URL, NATS_URL, serviceAvailable, uniqueName } from '../support/services.js';
import { telemetry, type Telemetry } from '../support/telemetry.js';

const available =
  (await postgresAvailable()) &&
  (await serviceAvailable('RabbitMQ', async () => {
    const connection = await amqp.connect(AMQP_URL);
    await connection.close();
  })) &&
  (await serviceAvailable('NATS JetStream', async () => {
    const nc = await connect({ servers: NATS_URL, timeout: 2_000 });
    await (await nc.jetstreamManager()).getAccountInfo();
    await nc.close();
  }));

describe.runIf(available)('trace context from outbox.enqueue to the inbox, through each transport', () => {
  let db: EffectsSchema;
  let t: Telemetry;
  /** What each test started, stopped after it in reverse order. */
  const cleanups: (() => Promise<unknown>)[] = [];

  beforeEach(() => {
    t = telemetry();
  });
  beforeAll(async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    db = await createEffectsSchema('rs_trace', 12);
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
    await t.shutdown();
  });
  afterAll(async () => {
    await db.drop();
    propagation.disable();
    context.disable();
  });

  function newInbox(): Inbox<pg.PoolClient> {
    return createInbox({ store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }), tracerProvider: t.tracerProvider });
  }

  /** The handler: one span of its own and one business write, both inside the inbox's transaction. */
  const handler: MessageHandler<pg.PoolClient> = async (message, tx) => {
    t.tracerProvider.getTracer('test').startSpan('write invoice').end();
    await db.write(tx, 'billing', message.id ?? '');
  };

  /**
   * Enqueues one message inside a span, runs a relay with `publisher` until the inbox's span shows up, and
   * checks the chain: enqueuing span → process span (a remote parent) → the handler's span.
   */
  async function traceThrough(topic: string, publisher: OutboxPublisher): Promise<void> {
    const outbox = createOutbox({ schema: db.schema });
    const producer = t.tracerProvider.getTracer('producer');
    const { id, enqueuing } = await producer.startActiveSpan('place order', async (span) => {
      const client = await db.pool.connect();
      try {
        const messageId = await outbox.enqueue(client, { topic, key: 'order-1', payload: '{"total":42}' });
        return { id: messageId, enqueuing: span.spanContext() };
      } finally {
        client.release();
        span.end();
      }
    });
    const relay: Relay = createRelay({ pool: db.pool, outbox, publisher, pollIntervalMs: 50 });
    cleanups.push(() => publisher.close(), () => relay.stop());
    relay.start();
    const processed = (): ReadableSpan | undefined =>
      t.spans.getFinishedSpans().find((s) => s.name === INBOX_SPANS.process && s.attributes['retrysafe.message_id.hash'] === keyHash('billing', id));
    await waitUntil(() => processed() !== undefined, 30_000, () => outboxBacklog(db.pool, db.schema));
    expect(processed()?.attributes['retrysafe.outcome']).toBe('processed');
    expectChild(processed(), enqueuing);
    const written = t.spans.getFinishedSpans().filter((s) => s.name === 'write invoice' && s.parentSpanContext?.spanId === processed()?.spanContext().spanId);
    expect(written).toHaveLength(1);
    expect(await db.count('billing', id)).toBe(1);
  }

  function expectChild(span: ReadableSpan | undefined, parent: SpanContext): void {
    expect(span?.spanContext().traceId).toBe(parent.traceId);
    expect(span?.parentSpanContext?.spanId).toBe(parent.spanId);
    expect(span?.parentSpanContext?.isRemote).toBe(true);
  }

  it('over RabbitMQ (AMQP headers)', async () => {
    const inbox = newInbox();
    const connection = await amqp.connect(AMQP_URL);
    cleanups.push(() => connection.close());
    const channel = await connection.createChannel();
    const queue = uniqueName('rs_trace_amqp');
    await channel.assertQueue(queue, { durable: false, autoDelete: false });
    cleanups.push(() => channel.deleteQueue(queue));
    const consumer = await startAmqpConsumer({ channel: await connection.createChannel(), queue, process: inboxProcessor(inbox, 'billing', handler), redriveIntervalMs: false });
    cleanups.push(() => consumer.stop());
    await traceThrough(queue, createAmqpPublisher({ url: AMQP_URL }));
  });

  it('over NATS JetStream (NATS headers)', async () => {
    const inbox = newInbox();
    const nc = await connect({ servers: NATS_URL });
    cleanups.push(() => nc.close());
    const jsm = await nc.jetstreamManager();
    const stream = uniqueName('rs_trace_nats');
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], storage: StorageType.Memory });
    cleanups.push(() => jsm.streams.delete(stream));
    await jsm.consumers.add(stream, { durable_name: 'billing', ack_policy: AckPolicy.Explicit, ack_wait: nanos(30_000) });
    const consumer = await startNatsConsumer({ jetstream: nc.jetstream(), stream, consumer: 'billing', process: inboxProcessor(inbox, 'billing', handler), redriveIntervalMs: false });
    cleanups.push(() => consumer.stop());
    await traceThrough(`${stream}.orders`, createNatsPublisher({ servers: NATS_URL }));
  });

  it('over a webhook (HTTP headers, passed to the inbox by the receiving endpoint)', async () => {
    const inbox = newInbox();
    const hook = await startWebhookReceiver();
    cleanups.push(() => hook.close());
    const process = inboxProcessor(inbox, 'billing', handler);
    hook.respond = async (request) => {
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(request.headers)) if (typeof value === 'string') headers[name] = value;
      const disposition = await process({ id: request.id, headers, body: Buffer.from(request.body), redelivered: false });
      return disposition === 'retry' ? 503 : 200;
    };
    await traceThrough(`hooks-${randomUUID()}`, createWebhookPublisher({ url: hook.url, secret: WEBHOOK_SECRET }));
  });

  it('over Kafka (record headers; librdkafka’s mock cluster)', async () => {
    const inbox = newInbox();
    const cluster = await startMockKafkaCluster();
    cleanups.push(() => cluster.close());
    const kafka = cluster.client();
    const topic = uniqueName('rs_trace_kafka');
    // The mock cluster creates a topic on its first record (it times out CreateTopics).
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic, messages: [{ key: 'warm-up', value: '{}', headers: { [KAFKA_MESSAGE_ID_HEADER]: randomUUID() } }] });
    await producer.disconnect();
    const consumer = await startKafkaConsumer({ kafka, groupId: uniqueName('billing'), topics: [topic], process: inboxProcessor(inbox, 'billing', handler), redriveIntervalMs: false });
    cleanups.push(() => consumer.stop());
    await traceThrough(topic, createKafkaPublisher({ kafka }));
  });
});
