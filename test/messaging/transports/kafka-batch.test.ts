/**
 * The batched Kafka consumer (`eachBatch`) on librdkafka's mock cluster with the PostgreSQL and SQLite
 * inboxes: duplicates inside a batch and across batches, a consumer SIGKILLed after the batch committed and
 * before its offsets were stored, and one failing message among good ones (retried from its own offset,
 * then dead-lettered to the dead-letter topic, after which the partition moves on).
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import type { KafkaJS } from '@confluentinc/kafka-javascript';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { BatchProcessor } from '../../../src/messaging/inbox/index.js';
import {
  KAFKA_DEAD_LETTER_REASON_HEADER,
  KAFKA_MESSAGE_ID_HEADER,
  startKafkaBatchConsumer,
  type KafkaConsumer,
} from '../../../src/messaging/transports/kafka.js';
import { runCrashingChild } from '../../support/crashing-child.js';
import { startMockKafkaCluster, type MockKafkaCluster } from '../../support/kafka.js';
import { waitUntil } from '../../support/outbox.js';
import { postgresAvailable } from '../../support/postgres-schema.js';
import { uniqueName } from '../../support/services.js';
import { openBatchStore, type BatchStore, type BatchStoreKind } from './batch-effects.js';
import { count, recordBatch, type BatchRecorder } from './recorder.js';

const available = await postgresAvailable();
const CHILD = fileURLToPath(new URL('./fixtures/batch-consumer-child.ts', import.meta.url));

/** Short group timeouts, so a SIGKILLed member's partitions move on within seconds. */
const GROUP_TIMING = { 'session.timeout.ms': 6_000, 'heartbeat.interval.ms': 500 } as const;

describe.runIf(available)('Kafka batched consumer on the mock cluster', () => {
  let cluster: MockKafkaCluster;
  let kafka: KafkaJS.Kafka;
  let producer: KafkaJS.Producer;
  const consumers: KafkaConsumer[] = [];
  const readers: KafkaJS.Consumer[] = [];
  const errors: unknown[] = [];

  beforeAll(async () => {
    cluster = await startMockKafkaCluster();
    kafka = cluster.client();
    producer = kafka.producer({ 'linger.ms': 0 });
    await producer.connect();
  });
  afterEach(async () => {
    await Promise.all([...consumers.splice(0).map((c) => c.stop()), ...readers.splice(0).map((r) => r.disconnect())]);
  });
  afterAll(async () => {
    await producer.disconnect();
    await cluster.close();
  });

  /** Sends one record per id, all with one key (so one partition, read in batches), in one request. */
  async function send(topic: string, ids: readonly string[]): Promise<void> {
    await producer.send({ topic, messages: ids.map((id) => ({ key: 'k', value: id, headers: { [KAFKA_MESSAGE_ID_HEADER]: id } })) });
  }

  async function consume(topic: string, process: BatchProcessor): Promise<BatchRecorder> {
    const recorder = recordBatch(process);
    consumers.push(
      await startKafkaBatchConsumer({
        kafka,
        groupId: `billing_${topic}`,
        topics: [topic],
        process: recorder.process,
        maxBatchSize: 50,
        retryDelayMs: 100,
        commitIntervalMs: 200,
        consumerConfig: GROUP_TIMING,
        redriveIntervalMs: false,
        onError: (error) => errors.push(error),
      }),
    );
    return recorder;
  }

  /**
   * Reads `topic` from the start in a group of its own until `expected` records arrived; answers their
   * reason headers by id. The dead-letter topic may be created a moment before: a subscription that finds
   * no leader for it yet asks again only at the next metadata refresh (librdkafka's default: 5 minutes),
   * so the reader refreshes every 500 ms.
   */
  async function readDeadLetters(topic: string, expected: number): Promise<Map<string, string | undefined>> {
    const reader = kafka.consumer({ 'group.id': uniqueName('rs_kafka_reader'), 'auto.offset.reset': 'earliest', 'allow.auto.create.topics': true, 'topic.metadata.refresh.interval.ms': 500, ...GROUP_TIMING });
    readers.push(reader);
    await reader.connect();
    await reader.subscribe({ topics: [topic] });
    const read = new Map<string, string | undefined>();
    await reader.run({
      eachMessage: async ({ message }) => {
        read.set(message.headers?.[KAFKA_MESSAGE_ID_HEADER]?.toString() ?? '', message.headers?.[KAFKA_DEAD_LETTER_REASON_HEADER]?.toString());
        await Promise.resolve();
      },
    });
    await waitUntil(() => read.size >= expected, 20_000, () => Promise.resolve(`read ${read.size} of ${expected}`));
    return read;
  }

  it('checks its batch size, which consumerConfig may not set', async () => {
    const options = { kafka, groupId: 'g', topics: ['t'], process: () => Promise.resolve([]) };
    await expect(startKafkaBatchConsumer({ ...options, maxBatchSize: 0 })).rejects.toThrow(
      new TypeError('retrysafe: startKafkaBatchConsumer option "maxBatchSize" must be an integer from 1 to 10000, got 0'),
    );
    await expect(startKafkaBatchConsumer({ ...options, consumerConfig: { 'js.consumer.max.batch.size': 10 } })).rejects.toThrow(
      /option "consumerConfig" may not set "js\.consumer\.max\.batch\.size"/,
    );
  });

  describe.each<BatchStoreKind>(['postgres', 'sqlite'])('with the %s inbox', (kind) => {
    let store: BatchStore;
    beforeAll(async () => {
      store = await openBatchStore(kind);
    });
    afterAll(() => store.close());

    it('applies each record once: duplicates inside a batch and across batches are acked without running again', async () => {
      const topic = uniqueName('rs_kafka_batch_t');
      const effects = store.tables();
      const ids = Array.from({ length: 10 }, () => randomUUID());
      await send(topic, [...ids, ...ids]);
      const runs = new Map<string, number>();
      const recorder = await consume(topic, effects.processor({ runs }));
      await recorder.until((seen) => ids.every((id) => count(seen, id, 'ack') === 2), 30_000);
      expect(recorder.batches.some((size) => size > 1)).toBe(true);
      await send(topic, ids);
      await recorder.until((seen) => ids.every((id) => count(seen, id, 'ack') === 3), 20_000);
      for (const id of ids) {
        expect(runs.get(id)).toBe(1);
        expect(await effects.count(id)).toBe(1);
      }
      expect(recorder.seen.every((s) => s.disposition === 'ack')).toBe(true);
    }, 60_000);

    it('answers the records of a batch whose consumer was SIGKILLed after the commit, before its offsets, as duplicates', async () => {
      const topic = uniqueName('rs_kafka_batch_t');
      const effects = store.tables();
      const ids = Array.from({ length: 6 }, () => randomUUID());
      await send(topic, ids);
      const child = { ...effects.childEnv, BOOTSTRAP: cluster.bootstrapServers, TOPIC: topic, GROUP: `billing_${topic}` };
      expect(await runCrashingChild(CHILD, 'batch consumer child', child, 30_000)).toBe('SIGKILL');
      // The child died after its first batch committed (the client may have handed it fewer than all six).
      const committed = new Set<string>();
      for (const id of ids) if ((await effects.count(id)) === 1) committed.add(id);
      expect(committed.size).toBeGreaterThan(0);
      const runs = new Map<string, number>();
      const recorder = await consume(topic, effects.processor({ runs }));
      await recorder.until((seen) => ids.every((id) => count(seen, id) === 1), 30_000);
      expect(recorder.seen.every((s) => s.disposition === 'ack')).toBe(true);
      for (const id of ids) {
        expect(runs.get(id)).toBe(committed.has(id) ? undefined : 1);
        expect(await effects.count(id)).toBe(1);
      }
    }, 60_000);

    it('reads again from a failing record only, dead-letters it after maxAttempts, and moves the partition on', async () => {
      const topic = uniqueName('rs_kafka_batch_t');
      const effects = store.tables();
      const poison = randomUUID();
      const before = randomUUID();
      const after = Array.from({ length: 4 }, () => randomUUID());
      await send(topic, [before, poison, ...after]);
      const runs = new Map<string, number>();
      const recorder = await consume(topic, effects.processor({ runs, maxAttempts: 2, fails: (id) => id === poison }));
      await recorder.until((seen) => count(seen, poison, 'dead_letter') === 1 && [before, ...after].every((id) => count(seen, id, 'ack') >= 1), 30_000);
      // The record before the failing one kept its stored offset: it is not read again.
      expect(count(recorder.seen, before)).toBe(1);
      expect(count(recorder.seen, poison, 'retry')).toBe(1);
      expect(runs.get(poison)).toBe(2);
      expect(await effects.count(poison)).toBe(0);
      for (const id of [before, ...after]) {
        expect(recorder.seen.filter((s) => s.id === id).every((s) => s.disposition === 'ack')).toBe(true);
        expect(runs.get(id)).toBe(1);
        expect(await effects.count(id)).toBe(1);
      }
      expect(await effects.deadLetters()).toEqual([poison]);
      expect((await readDeadLetters(`${topic}.dlq`, 1)).get(poison)).toBe('dead_letter');
      // Past the dead letter, the partition goes on.
      const later = randomUUID();
      await send(topic, [later]);
      await recorder.until((seen) => count(seen, later, 'ack') === 1, 20_000);
      expect(count(recorder.seen, poison)).toBe(2);
    }, 60_000);
  });
});
