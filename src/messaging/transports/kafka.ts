/**
 * `retrysafe/kafka`: the Kafka transport on `@confluentinc/kafka-javascript` (librdkafka, through its
 * KafkaJS-compatible API): an outbox publisher on an idempotent producer, and an inbox consumer in a
 * consumer group that stores a message's offset only after the inbox transaction has committed or rolled
 * back, and sends dead letters to a dead-letter topic. `startKafkaBatchConsumer` (kafka-batch.ts) is the
 * consumer in `eachBatch` mode, one inbox transaction per batch.
 *
 * @module
 */
import type { KafkaJS } from '@confluentinc/kafka-javascript';
import { requireFunction, requireOptions } from '../../core/validate.js';
import type { Disposition, MessageProcessor } from '../inbox/processor.js';
import { PublishError } from '../outbox/errors.js';
import type { OutboxMessage, OutboxPublisher } from '../outbox/publisher.js';
import { LazyProducer, requireKafka, requireProducerConfig, type KafkaProperties } from './kafka-client.js';
import { KafkaGroup, type KafkaConsumer, type KafkaGroupOptions } from './kafka-group.js';
import { KAFKA_MESSAGE_ID_HEADER, toBrokerMessage } from './kafka-records.js';
import { extractId } from './runner.js';

export type { KafkaProperties } from './kafka-client.js';
export type { KafkaConsumer, KafkaGroupOptions } from './kafka-group.js';
export { KAFKA_DEAD_LETTER_REASON_HEADER, KAFKA_DEAD_LETTER_SOURCE_HEADER, KAFKA_MESSAGE_ID_HEADER } from './kafka-records.js';
export { startKafkaBatchConsumer, type KafkaBatchConsumerOptions } from './kafka-batch.js';

/** Options of {@link createKafkaPublisher}. */
export interface KafkaPublisherOptions {
  /** The client (`new KafkaJS.Kafka({ 'bootstrap.servers': … })`) carrying brokers, TLS and SASL. */
  readonly kafka: KafkaJS.Kafka;
  /** The topic of a message. @defaultValue the message's `topic` */
  readonly topic?: (message: OutboxMessage) => string;
  /**
   * Extra librdkafka producer properties (`linger.ms`, `compression.type`, `message.timeout.ms` …).
   * `enable.idempotence` and `acks` are fixed to `true` and `-1` (all) and may not be given.
   * @defaultValue `{}`
   */
  readonly producerConfig?: KafkaProperties;
}

/** The Kafka publisher. */
export interface KafkaPublisher extends OutboxPublisher {
  /** Flushes and disconnects its producer (if connected). Later publishes connect again. */
  close(): Promise<void>;
}

/**
 * Creates the relay's Kafka publisher. Each outbox message becomes one record: key = the outbox row's
 * ordering key (so one key's messages share a partition and keep their order), value = the payload,
 * headers = the outbox headers plus {@link KAFKA_MESSAGE_ID_HEADER} = the outbox message id. The producer
 * is idempotent with `acks=all`; a publish resolves when the partition leader acknowledged the record
 * after replicating it to the in-sync replicas. The producer connects on the first publish.
 *
 * Rejections (`PublishError`): a record the broker can never take (error code `MESSAGE_TOO_LARGE`,
 * `RECORD_LIST_TOO_LARGE`, `TOPIC_AUTHORIZATION_FAILED` or `INVALID_RECORD`) is permanent, so the
 * relay dead-letters it at once; anything else is transient. A fatal producer error (the idempotent
 * producer's sequence broken) drops the producer and the next publish starts a new one.
 *
 * @throws TypeError naming the option when an option is invalid
 * @example
 * ```ts
 * import { KafkaJS } from '@confluentinc/kafka-javascript';
 * import { createKafkaPublisher } from 'retrysafe/kafka';
 *
 * const kafka = new KafkaJS.Kafka({ 'bootstrap.servers': 'kafka-1:9092,kafka-2:9092' });
 * const publisher = createKafkaPublisher({ kafka });
 * const relay = createRelay({ pool, outbox, publisher });
 * ```
 */
export function createKafkaPublisher(options: KafkaPublisherOptions): KafkaPublisher {
  requireOptions('createKafkaPublisher', options);
  const kafka = requireKafka('createKafkaPublisher', options.kafka);
  const topic = requireFunction<(message: OutboxMessage) => string>('topic', options.topic ?? ((message: OutboxMessage) => message.topic), 'createKafkaPublisher');
  const producerConfig = requireProducerConfig('createKafkaPublisher', 'producerConfig', options.producerConfig);
  return new IdempotentPublisher(new LazyProducer(kafka, producerConfig), topic);
}

class IdempotentPublisher implements KafkaPublisher {
  constructor(
    private readonly producer: LazyProducer,
    private readonly topic: (message: OutboxMessage) => string,
  ) {}

  async publish(message: OutboxMessage, signal: AbortSignal): Promise<void> {
    const abortError = (): PublishError => new PublishError('The Kafka publish was aborted before its acknowledgement.', false, { cause: signal.reason });
    if (signal.aborted) throw abortError();
    const record: KafkaJS.Message = {
      key: message.key,
      value: Buffer.from(message.payload.buffer, message.payload.byteOffset, message.payload.byteLength),
      headers: { ...message.headers, [KAFKA_MESSAGE_ID_HEADER]: message.id },
    };
    // librdkafka cannot take a record back once queued: an abort only stops the wait. The relay then retries
    // the message, and the consumer's inbox drops the second copy by its id should the first one land too.
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => reject(abortError());
      signal.addEventListener('abort', onAbort, { once: true });
    });
    try {
      await Promise.race([this.producer.send(this.topic(message), record), aborted]);
    } finally {
      if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
    }
  }

  close(): Promise<void> {
    return this.producer.close();
  }
}

/** Options of {@link startKafkaConsumer}. */
export interface KafkaConsumerOptions extends KafkaGroupOptions {
  /** Decides each message: `inboxProcessor(inbox, consumer, handler)`, or a plain function for a consumer without the inbox. */
  readonly process: MessageProcessor;
}

/**
 * Starts a member of consumer group `groupId` on `topics`. Each message goes to `process`, and only after
 * it returns is the message settled:
 * - `ack` → its offset is stored (committed every `commitIntervalMs` and on stop);
 * - `retry` (or `process` rejecting, e.g. the database is down) → the partition pauses for `retryDelayMs`
 *   and reads the same message again; later messages of that partition wait, so per-key order holds;
 * - `dead_letter` and `reject` → the record (same key, value and headers, plus
 *   {@link KAFKA_DEAD_LETTER_REASON_HEADER} and {@link KAFKA_DEAD_LETTER_SOURCE_HEADER}) is published to
 *   the dead-letter topic and acknowledged there before the offset is stored; when that publish fails the
 *   message is read again (the inbox answers `dead_letter` again, and publishes it again).
 *
 * A crash before the commit leaves the offset where it was; the group gives the partition to another
 * member (after `session.timeout.ms`), which reads the message again, and the inbox answers it as a
 * duplicate. Kafka does not flag such a redelivery: `redelivered` is true only for a `retry` read again by
 * this process.
 *
 * @throws TypeError naming the option when an option is invalid
 * @throws the driver's error when the brokers cannot be reached or the subscription fails
 * @example
 * ```ts
 * import { KafkaJS } from '@confluentinc/kafka-javascript';
 * import { createInbox, createPostgresInboxStore, inboxProcessor } from 'retrysafe/inbox';
 * import { startKafkaConsumer } from 'retrysafe/kafka';
 *
 * const kafka = new KafkaJS.Kafka({ 'bootstrap.servers': 'kafka-1:9092' });
 * const inbox = createInbox({ store: createPostgresInboxStore({ pool }) });
 * const consumer = await startKafkaConsumer({
 *   kafka,
 *   groupId: 'billing',
 *   topics: ['orders'],
 *   process: inboxProcessor(inbox, 'billing', async (message, tx) => {
 *     await tx.query('INSERT INTO invoices (order_id) VALUES ($1)', [message.id]);
 *   }),
 * });
 * process.on('SIGTERM', () => void consumer.stop());
 * ```
 */
export async function startKafkaConsumer(options: KafkaConsumerOptions): Promise<KafkaConsumer> {
  requireOptions('startKafkaConsumer', options);
  const group = new KafkaGroup('startKafkaConsumer', options);
  const processor = options.process;

  const settle = async (topic: string, partition: number, message: KafkaJS.KafkaMessage, pause: () => () => void): Promise<void> => {
    const source = `${topic}/${partition}/${message.offset}`;
    let disposition: Disposition;
    try {
      disposition = await processor(toBrokerMessage(message, extractId(group.messageId, message), group.wasRetried(source)));
    } catch (error) {
      group.onError(error);
      disposition = 'retry';
    }
    disposition = await group.deadLetter(topic, message, disposition, source);
    if (disposition === 'retry') group.retryLater(source, pause);
    group.settled(source);
  };

  return group.start(
    {
      eachMessage: (payload) => {
        const settling = settle(payload.topic, payload.partition, payload.message, () => payload.pause());
        group.inFlight.add(settling);
        return settling;
      },
    },
    processor,
  );
}
