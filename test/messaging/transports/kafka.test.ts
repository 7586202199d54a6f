/**
 * The Kafka transport against librdkafka's mock cluster (3 brokers, in this process) with the PostgreSQL
 * outbox and inbox: the relay's acknowledged publishes (key, id header, per-key order), a record the broker
 * can never take, duplicate records, a consumer group of two, consumers SIGKILLed after commit and
 * mid-handler, a poison message in the dead-letter topic, and per-key order through retries.
 */
import { randomUUID } from 'node:crypto';
import type { KafkaJS } from '@confluentinc/kafka-javascript';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, createPostgresInboxStore, inboxProcessor, type Inbox, type MessageHandler, type MessageProcessor } from '../../../src/messaging/inbox/index.js';
import { createOutbox, createRelay, PublishError, type Relay } from '../../../src/messaging/outbox/index.js';
import {
  createKafkaPublisher,
  KAFKA_DEAD_LETTER_REASON_HEADER,
  KAFKA_DEAD_LETTER_SOURCE_HEADER,
  KAFKA_MESSAGE_ID_HEADER,
  startKafkaConsumer,
  type KafkaConsumer,
} from '../../../src/messaging/transports/kafka.js';
import { postgresAvailable } from '../../support/postgres-schema.js';
import { startMockKafkaCluster, type MockKafkaCluster } from '../../support/kafka.js';
import { uniqueName } from '../../support/services.js';
import { expectRedeliveryProcessed, expectRedeliverySkipped } from './child.js';
import { outboxBacklog, waitUntil } from '../../support/outbox.js';
import { count, record, type Recorder } from './recorder.js';
import { createEffectsSchema, writeEffect, type EffectsSchema } from '../../support/messaging.js';

const available = await postgresAvailable();

/** What a plain reader saw of one record. */
interface Read {
  readonly partition: number;
  readonly offset: number;
  readonly key: string | undefined;
  readonly value: string;
  readonly headers: Record<string, string>;
}

/** Short group timeouts, so a SIGKILLed member's partitions move on within seconds. */
const GROUP_TIMING = { 'session.timeout.ms': 6_000, 'heartbeat.interval.ms': 500 } as const;

describe.runIf(available)('Kafka transport on the mock cluster', () => {
  let cluster: MockKafkaCluster;
  let kafka: KafkaJS.Kafka;
  let db: EffectsSchema;
  let producer: KafkaJS.Producer;
  const consumers: KafkaConsumer[] = [];
  const relays: Relay[] = [];
  const readers: KafkaJS.Consumer[] = [];

  beforeAll(async () => {
    cluster = await startMockKafkaCluster();
    kafka = cluster.client();
    db = await createEffectsSchema('rs_kafka', 12);
    producer = kafka.producer({ 'linger.ms': 0 });
    await producer.connect();
  });
  afterEach(async () => {
    await Promise.all([...consumers.splice(0).map((c) => c.stop()), ...relays.splice(0).map((r) => r.stop()), ...readers.splice(0).map((r) => r.disconnect())]);
  });
  afterAll(async () => {
    await producer.disconnect();
    await db.drop();
    await cluster.close();
  });

  const topicName = (): string => uniqueName('rs_kafka_t');

  async function send(topic: string, key: string, id: string | undefined, value = 'ok'): Promise<void> {
    await producer.send({ topic, messages: [{ key, value, headers: id === undefined ? {} : { [KAFKA_MESSAGE_ID_HEADER]: id } }] });
  }

  /** Reads `topic` from the start in its own group until `expected` records arrived. */
  async function readTopic(topic: string, expected: number): Promise<Read[]> {
    const reader = kafka.consumer({ 'group.id': uniqueName('rs_kafka_reader'), 'auto.offset.reset': 'earliest', 'allow.auto.create.topics': true });
    readers.push(reader);
    await reader.connect();
    await reader.subscribe({ topics: [topic] });
    const read: Read[] = [];
    await reader.run({
      eachMessage: async ({ partition, message }) => {
        const headers: Record<string, string> = {};
        for (const [name, value] of Object.entries(message.headers ?? {})) if (value !== undefined) headers[name] = value.toString();
        read.push({ partition, offset: Number(message.offset), key: message.key?.toString(), value: message.value?.toString() ?? '', headers });
        await Promise.resolve();
      },
    });
    await waitUntil(() => read.length >= expected, 20_000, () => Promise.resolve(`read ${read.length} of ${expected}`));
    return read;
  }

  function newInbox(maxAttempts = 5): Inbox<pg.PoolClient> {
    return createInbox({ store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }), maxAttempts });
  }

  async function consume(topic: string, process: MessageProcessor, groupId = 'billing', retryDelayMs = 100): Promise<void> {
    consumers.push(
      await startKafkaConsumer({ kafka, groupId: `${groupId}_${topic}`, topics: [topic], process, retryDelayMs, consumerConfig: GROUP_TIMING, redriveIntervalMs: false }),
    );
  }

  /** The crashing child's variables: a member of the `billing` group on `topic`. */
  function childEnv(topic: string): Record<string, string> {
    return { BROKER: 'kafka', BOOTSTRAP: cluster.bootstrapServers, TOPIC: topic, GROUP: `billing_${topic}` };
  }

  async function consumeWithInbox(topic: string, inbox: Inbox<pg.PoolClient>, handler: MessageHandler<pg.PoolClient>): Promise<Recorder> {
    const recorder = record(inboxProcessor(inbox, 'billing', handler));
    await consume(topic, recorder.process);
    return recorder;
  }


  it('publishes through the relay with acks: key = outbox key, id in a header, each key in order in its partition', async () => {
    const topic = topicName();
    const outbox = createOutbox({ schema: db.schema });
    const publisher = createKafkaPublisher({ kafka, producerConfig: { 'linger.ms': 1 } });
    const relay = createRelay({ pool: db.pool, outbox, publisher, pollIntervalMs: 50, perKeyLimit: 5 });
    relays.push(relay);
    const ids: string[] = [];
    for (let n = 0; n < 15; n++) {
      for (let k = 0; k < 6; k++) {
        const client = await db.pool.connect();
        try {
          ids.push(await outbox.enqueue(client, { topic, key: `key-${k}`, payload: JSON.stringify({ k, n }), headers: { 'x-trace': `t${k}` } }));
        } finally {
          client.release();
        }
      }
    }
    relay.start();
    await waitUntil(async () => (await outbox.status(db.pool)).pending === 0, 20_000, () => outboxBacklog(db.pool, db.schema));
    await publisher.close();
    const read = await readTopic(topic, ids.length);
    expect(read).toHaveLength(ids.length);
    expect(read.map((r) => r.headers[KAFKA_MESSAGE_ID_HEADER]).sort()).toEqual([...ids].sort());
    const perKey = new Map<string, Read[]>();
    for (const r of read) {
      const { k } = JSON.parse(r.value) as { k: number };
      expect(r.key).toBe(`key-${k}`);
      expect(r.headers['x-trace']).toBe(`t${k}`);
      perKey.set(r.key ?? '', [...(perKey.get(r.key ?? '') ?? []), r]);
    }
    for (const records of perKey.values()) {
      expect(new Set(records.map((r) => r.partition)).size).toBe(1);
      const inOffsetOrder = [...records].sort((a, b) => a.offset - b.offset);
      expect(inOffsetOrder.map((r) => (JSON.parse(r.value) as { n: number }).n)).toEqual(Array.from({ length: 15 }, (_, n) => n));
    }
  });

  it('fails a record the broker can never take as a permanent PublishError', async () => {
    const publisher = createKafkaPublisher({ kafka, producerConfig: { 'message.max.bytes': 1_000 } });
    try {
      const message = { id: randomUUID(), topic: topicName(), key: 'k', payload: new Uint8Array(5_000), headers: {}, attempt: 1, createdAt: Date.now() };
      const error: unknown = await publisher.publish(message, new AbortController().signal).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PublishError);
      expect((error as PublishError).permanent).toBe(true);
    } finally {
      await publisher.close();
    }
  });

  it('stops waiting for the acknowledgement when the relay aborts the publish', async () => {
    // A 5 s linger holds the record in librdkafka well past the abort.
    const publisher = createKafkaPublisher({ kafka, producerConfig: { 'linger.ms': 5_000 } });
    try {
      const message = { id: randomUUID(), topic: topicName(), key: 'k', payload: new Uint8Array(1), headers: {}, attempt: 1, createdAt: Date.now() };
      await expect(publisher.publish(message, AbortSignal.abort())).rejects.toThrow(/aborted before its acknowledgement/);
      const controller = new AbortController();
      const started = Date.now();
      const waiting = publisher.publish(message, controller.signal);
      setTimeout(() => controller.abort(), 200);
      await expect(waiting).rejects.toBeInstanceOf(PublishError);
      expect(Date.now() - started).toBeLessThan(4_000);
    } finally {
      await publisher.close();
    }
  });

  it('names itself when its options are not an object', async () => {
    await expect(startKafkaConsumer(undefined as never)).rejects.toThrow('retrysafe: startKafkaConsumer expects an options object, got undefined');
  });

  it('refuses to turn producer idempotence or acks=all off', () => {
    expect(() => createKafkaPublisher({ kafka, producerConfig: { acks: 1 } })).toThrow(/producerConfig" may not set "acks"/);
    expect(() => createKafkaPublisher({ kafka, producerConfig: { 'enable.idempotence': false } })).toThrow(TypeError);
  });

  it('runs the handler once for five records carrying one message id', async () => {
    const topic = topicName();
    const id = randomUUID();
    for (let i = 0; i < 5; i++) await send(topic, 'k', id);
    const runs = new Map<string, number>();
    const recorder = await consumeWithInbox(topic, newInbox(), writeEffect(db, runs));
    await recorder.until((seen) => count(seen, id) === 5, 20_000);
    expect(count(recorder.seen, id, 'ack')).toBe(5);
    expect(runs.get(id)).toBe(1);
    expect(await db.count('billing', id)).toBe(1);
  });

  it('shares the partitions between two members of a group, each message taking effect once', async () => {
    const topic = topicName();
    await send(topic, 'warm-up', randomUUID());
    const inbox = newInbox();
    const runs = new Map<string, number>();
    const first = await consumeWithInbox(topic, inbox, writeEffect(db, runs));
    const second = await consumeWithInbox(topic, inbox, writeEffect(db, runs));
    const ids: string[] = [];
    // Publish in rounds until both members have handled some: the second one's join moves partitions.
    await waitUntil(
      async () => {
        for (let i = 0; i < 8; i++) {
          const id = randomUUID();
          ids.push(id);
          await send(topic, randomUUID(), id);
        }
        await new Promise((resolve) => setTimeout(resolve, 250));
        return first.seen.length > 0 && second.seen.length > 0;
      },
      30_000,
      () => Promise.resolve(`first ${first.seen.length}, second ${second.seen.length}`),
    );
    const effects = async (): Promise<number[]> => {
      const { rows } = await db.pool.query<{ message_id: string; n: number }>(
        `SELECT message_id, count(*)::int AS n FROM "${db.schema}".effects WHERE consumer = 'billing' AND message_id = ANY($1) GROUP BY message_id`,
        [ids],
      );
      const counted = new Map(rows.map((row) => [row.message_id, row.n]));
      return ids.map((id) => counted.get(id) ?? 0);
    };
    await waitUntil(async () => (await effects()).every((n) => n === 1), 20_000, async () => `effects ${JSON.stringify(await effects())}`);
    for (const id of ids) expect(runs.get(id)).toBe(1);
  }, 60_000);

  it('skips the redelivery after a consumer is SIGKILLed between commit and offset commit (effect count 1)', async () => {
    const topic = topicName();
    const id = randomUUID();
    await send(topic, 'k', id);
    await expectRedeliverySkipped({ db, id, env: childEnv(topic), consume: (handler) => consumeWithInbox(topic, newInbox(), handler), timeoutMs: 30_000 });
  });

  it('persists nothing when a consumer is SIGKILLed mid-handler, and processes the redelivery', async () => {
    const topic = topicName();
    const id = randomUUID();
    await send(topic, 'k', id);
    await expectRedeliveryProcessed({ db, id, env: childEnv(topic), consume: (handler) => consumeWithInbox(topic, newInbox(), handler), timeoutMs: 30_000 });
  });

  it('dead-letters a poison message to the dead-letter topic after maxAttempts, and a record without an id at once', async () => {
    const topic = topicName();
    const poison = randomUUID();
    await send(topic, 'poison-key', poison, 'poison');
    await send(topic, 'anonymous-key', undefined, 'no id');
    const good = Array.from({ length: 6 }, () => randomUUID());
    for (const id of good) await send(topic, randomUUID(), id);
    const inbox = newInbox(3);
    const recorder = await consumeWithInbox(topic, inbox, async (message, tx) => {
      if (new TextDecoder().decode(message.body) === 'poison') throw new Error('cannot parse');
      await db.write(tx, 'billing', message.id ?? '');
    });
    await recorder.until((seen) => count(seen, poison, 'dead_letter') === 1 && good.every((id) => count(seen, id, 'ack') === 1), 30_000);
    expect(count(recorder.seen, poison, 'retry')).toBe(2);
    expect(recorder.seen.filter((s) => s.disposition === 'reject')).toHaveLength(1);
    const letters = await readTopic(`${topic}.dlq`, 2);
    const byReason = new Map(letters.map((l) => [l.headers[KAFKA_DEAD_LETTER_REASON_HEADER], l]));
    expect(byReason.get('dead_letter')).toMatchObject({ key: 'poison-key', value: 'poison', headers: { [KAFKA_MESSAGE_ID_HEADER]: poison } });
    expect(byReason.get('dead_letter')?.headers[KAFKA_DEAD_LETTER_SOURCE_HEADER]).toMatch(new RegExp(`^${topic}/\\d+/\\d+$`));
    expect(byReason.get('reject')).toMatchObject({ key: 'anonymous-key', value: 'no id' });
    expect((await inbox.deadLetters({ consumer: 'billing' })).some((l) => l.messageId === poison)).toBe(true);
  });

  it('keeps each key in order while messages are retried', async () => {
    const topic = topicName();
    const keys = 4;
    const perKey = 10;
    for (let n = 0; n < perKey; n++) for (let k = 0; k < keys; k++) await send(topic, `key-${k}`, `${topic}-${k}-${n}`, JSON.stringify({ k, n }));
    const handled = new Map<number, number[]>();
    const failedOnce = new Set<string>();
    const recorder = await consumeWithInbox(topic, newInbox(), async (message, tx) => {
      const { k, n } = JSON.parse(new TextDecoder().decode(message.body)) as { k: number; n: number };
      // Two messages of each key fail their first attempt: the partition must wait for each. (Few of them: the
      // client stops every partition's worker to apply a seek back, so a retry costs far more than a message.)
      if (n % 5 === 1 && !failedOnce.has(message.id ?? '')) {
        failedOnce.add(message.id ?? '');
        throw new Error('transient');
      }
      handled.set(k, [...(handled.get(k) ?? []), n]);
      await db.write(tx, 'billing', message.id ?? '');
    });
    await recorder.until((seen) => seen.filter((s) => s.disposition === 'ack').length === keys * perKey, 25_000);
    for (let k = 0; k < keys; k++) expect(handled.get(k)).toEqual(Array.from({ length: perKey }, (_, n) => n));
    expect(count(recorder.seen, `${topic}-0-1`, 'retry')).toBe(1);
  });
});
