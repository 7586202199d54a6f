/**
 * The orders scenario on Kafka: librdkafka's mock cluster (3 brokers) started in the demo's process, a topic
 * per run (4 partitions, each replicated on the 3 brokers) keyed by order id, and one consumer group; the
 * relay publishes through `createKafkaPublisher` (idempotent producer, `acks=all`), the consumer reads through
 * `startKafkaConsumer`, which stores an offset only once the inbox transaction has settled. The cluster, and
 * the topic with it, is gone when the run ends.
 *
 * @module
 */
import { KafkaJS, RdKafka } from '@confluentinc/kafka-javascript';
import { createKafkaPublisher, startKafkaConsumer } from '../../messaging/transports/kafka.js';
import { startMockKafkaCluster } from '../harness/mock-kafka.js';
import type { KafkaEndpoint, RunBroker, WorkerTransport } from './transport.js';

/** Brokers of the mock cluster. */
const BROKERS = 3;
/**
 * The consumer's `session.timeout.ms`: how long the group waits for a SIGKILLed member before giving its
 * partitions to the next one. Above the mock's 3 s delay of a new group's first rebalance, during which a
 * joining member sends no heartbeat and would otherwise time out.
 */
const SESSION_TIMEOUT_MS = 4_000;
/** The consumer's heartbeat interval, in milliseconds. */
const HEARTBEAT_INTERVAL_MS = 500;
/** How often the consumer commits the offsets it stored, in milliseconds: a SIGKILL re-reads at most this much. */
const COMMIT_INTERVAL_MS = 500;
/** Longest wait for a metadata or offsets answer of the cluster, in milliseconds. */
const QUERY_TIMEOUT_MS = 5_000;

/**
 * Starts the mock cluster and creates the run's topic `retrysafe.orders.<run>` (by asking for its metadata:
 * the mock has no CreateTopics), for the consumer group `retrysafe.orders.<run>.billing`.
 *
 * @param onError - where the cluster's error log lines go
 * @throws Error when the cluster does not start or does not create the topic
 */
export async function startKafkaBroker(runId: string, onError: (message: string) => void): Promise<RunBroker> {
  const cluster = await startMockKafkaCluster({ brokers: BROKERS, onError });
  const topic = `retrysafe.orders.${runId}`;
  const groupId = `${topic}.billing`;
  const probe = new RdKafka.Producer({ 'bootstrap.servers': cluster.bootstrapServers, 'allow.auto.create.topics': true, log_level: 3 });
  const admin = cluster.client().admin();
  try {
    await callback<RdKafka.Metadata>((done) => {
      probe.connect({}, done);
    });
    const metadata = await callback<RdKafka.Metadata>((done) => {
      probe.getMetadata({ topic, allTopics: false, timeout: QUERY_TIMEOUT_MS }, done);
    });
    const partitions = metadata.topics.find((t) => t.name === topic)?.partitions.map((p) => p.id) ?? [];
    if (partitions.length === 0) throw new Error(`the mock Kafka cluster did not create topic ${topic}`);
    await admin.connect();
    const watermarks = (partition: number): Promise<RdKafka.WatermarkOffsets> =>
      callback((done) => {
        probe.queryWatermarkOffsets(topic, partition, QUERY_TIMEOUT_MS, done);
      });
    return {
      endpoint: { kind: 'kafka', bootstrapServers: cluster.bootstrapServers, topic, groupId },
      created: [`topic ${topic} (on the mock Kafka cluster, which ends with the run)`],
      async backlog(): Promise<number> {
        // The partitions are named: the mock answers an offset fetch of "all the group's topics" with nothing.
        const [committed] = await admin.fetchOffsets({ groupId, topics: [{ topic, partitions }] });
        let lag = 0;
        for (const partition of partitions) {
          const { lowOffset, highOffset } = await watermarks(partition);
          // A partition without a committed offset (-1001) is read from the start (`auto.offset.reset=earliest`).
          const offset = Number(committed?.partitions.find((p) => p.partition === partition)?.offset ?? -1);
          lag += highOffset - (offset >= 0 ? offset : lowOffset);
        }
        return lag;
      },
      async dispose(): Promise<void> {
        await admin.disconnect();
        await new Promise<void>((resolve) => probe.disconnect(() => resolve()));
        await cluster.close();
      },
    };
  } catch (error) {
    await admin.disconnect().catch(() => undefined);
    await new Promise<void>((resolve) => probe.disconnect(() => resolve()));
    await cluster.close();
    throw error;
  }
}

/** A librdkafka call that answers through a callback, as a promise. */
function callback<T>(call: (done: (error: RdKafka.LibrdKafkaError | null | undefined, value: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => {
    call((error, value) => {
      if (error) reject(error instanceof Error ? error : new Error(error.message));
      else resolve(value);
    });
  });
}

/** The workers' side: publish to the run's topic, consume it in the run's group. */
export function kafkaTransport(endpoint: KafkaEndpoint): WorkerTransport {
  const kafka = new KafkaJS.Kafka({ 'bootstrap.servers': endpoint.bootstrapServers, log_level: 3 });
  return {
    publisher: () => createKafkaPublisher({ kafka, topic: () => endpoint.topic, producerConfig: { 'linger.ms': 0 } }),
    consume: (process, onError) =>
      startKafkaConsumer({
        kafka,
        groupId: endpoint.groupId,
        topics: [endpoint.topic],
        process,
        commitIntervalMs: COMMIT_INTERVAL_MS,
        consumerConfig: { 'session.timeout.ms': SESSION_TIMEOUT_MS, 'heartbeat.interval.ms': HEARTBEAT_INTERVAL_MS },
        redriveIntervalMs: false,
        onError,
      }),
  };
}
