/**
 * `retrysafe/kafka`: the Kafka transport on `@confluentinc/kafka-javascript` (librdkafka, through its
 * KafkaJS-compatible API): an outbox publisher on an idempotent producer, and an inbox consumer in a
 * consumer group that stores a message's offset only after the inbox transaction has committed or rolled
 * back, and sends dead letters to a dead-letter topic.
 *
 * @module
 */
import type { KafkaJS } from '@confluentinc/kafka-javascript';
import { describe, requireDurationMs, requireFunction, requireIntegerIn, requireNonEmptyString, requireOptions } from '../../core/validate.js';
import type { BrokerMessage, Disposition, MessageProcessor, RedriveOptions } from '../inbox/processor.js';
import { PublishError } from '../outbox/errors.js';
import type { OutboxMessage, OutboxPublisher } from '../outbox/publisher.js';
import { InFlight, RedrivePoller, requireMessageId, resolveCommonOptions } from './runner.js';

/** The header carrying the outbox message id (the id the consumer's inbox deduplicates on). */
export const KAFKA_MESSAGE_ID_HEADER = 'Retrysafe-Message-Id';
/** Header of a dead letter: why it was dead-lettered, `dead_letter` (the inbox gave up) or `reject` (no message id). */
export const KAFKA_DEAD_LETTER_REASON_HEADER = 'Retrysafe-Dead-Letter-Reason';
/** Header of a dead letter: the topic, partition and offset it was read from, as `topic/partition/offset`. */
export const KAFKA_DEAD_LETTER_SOURCE_HEADER = 'Retrysafe-Dead-Letter-Source';

/** librdkafka properties (https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md), e.g. `{ 'linger.ms': 0 }`. */
export type KafkaProperties = Readonly<Record<string, string | number | boolean>>;

/**
 * Producer settings the transport owns: idempotence (KIP-98) so a librdkafka retry after a lost produce
 * response never writes a second copy nor reorders a partition, and `acks=all` so a confirmed message is
 * on every in-sync replica.
 */
const IDEMPOTENT_PRODUCER = { 'enable.idempotence': true, acks: -1 } as const;

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

/** An idempotent producer connected on first use, replaced after a fatal error. */
class LazyProducer {
  private producer: Promise<KafkaJS.Producer> | undefined;

  constructor(
    private readonly kafka: KafkaJS.Kafka,
    private readonly config: KafkaProperties,
  ) {}

  /** Sends one record and waits for its acknowledgement. @throws PublishError */
  async send(topic: string, record: KafkaJS.Message): Promise<void> {
    const opening = this.open();
    let producer: KafkaJS.Producer;
    try {
      producer = await opening;
    } catch (error) {
      throw new PublishError(`Kafka is unreachable: ${errorMessage(error)}`, false, { cause: error });
    }
    try {
      await producer.send({ topic, messages: [record] });
    } catch (error) {
      if (isFatal(error) && this.producer === opening) {
        this.producer = undefined;
        void producer.disconnect().catch(() => undefined);
      }
      throw new PublishError(`Kafka did not acknowledge the record: ${errorMessage(error)}`, isPermanent(error), { cause: error });
    }
  }

  async close(): Promise<void> {
    const producer = this.producer;
    this.producer = undefined;
    const open = await producer?.catch(() => undefined);
    await open?.disconnect().catch(() => undefined);
  }

  private open(): Promise<KafkaJS.Producer> {
    if (this.producer === undefined) {
      const producer = this.kafka.producer({ ...this.config, ...IDEMPOTENT_PRODUCER });
      const opening = producer.connect().then(() => producer);
      this.producer = opening;
      // A failed connect is forgotten, so the next publish tries again.
      opening.catch(() => {
        if (this.producer === opening) this.producer = undefined;
      });
    }
    return this.producer;
  }
}

/** Options of {@link startKafkaConsumer}. */
export interface KafkaConsumerOptions extends RedriveOptions {
  /** The client (`new KafkaJS.Kafka({ 'bootstrap.servers': … })`) carrying brokers, TLS and SASL. */
  readonly kafka: KafkaJS.Kafka;
  /** The consumer group (`group.id`); the partitions of `topics` are shared among its members. */
  readonly groupId: string;
  /** The topics to consume. */
  readonly topics: readonly string[];
  /** Decides each message: `inboxProcessor(inbox, consumer, handler)`, or a plain function for a consumer without the inbox. */
  readonly process: MessageProcessor;
  /** The dead-letter topic of a topic. @defaultValue `` `${topic}.dlq` `` */
  readonly deadLetterTopic?: (topic: string) => string;
  /** Partitions handled at once (one message at a time per partition, so per-key order holds). @defaultValue 8 */
  readonly partitionsConsumedConcurrently?: number;
  /** The id used for dedup. @defaultValue the {@link KAFKA_MESSAGE_ID_HEADER} header */
  readonly messageId?: (message: KafkaJS.KafkaMessage) => string | undefined;
  /** How long a partition waits before a message answered `retry` is read again, in milliseconds. @defaultValue 1_000 */
  readonly retryDelayMs?: number;
  /**
   * How often stored offsets are committed (`auto.commit.interval.ms`), in milliseconds. After a crash the
   * group re-reads at most this much; the inbox answers those messages as duplicates. @defaultValue 5_000
   */
  readonly commitIntervalMs?: number;
  /**
   * Extra librdkafka consumer properties (`session.timeout.ms`, `max.poll.interval.ms` …). `group.id`,
   * `enable.auto.commit` and `auto.commit.interval.ms` are set from the options above and may not be given.
   * @defaultValue `{ 'auto.offset.reset': 'earliest' }` (a new group reads what was published before it first joined)
   */
  readonly consumerConfig?: KafkaProperties;
  /** Extra librdkafka properties of the dead-letter producer (idempotent, `acks=all`). @defaultValue `{}` */
  readonly deadLetterProducerConfig?: KafkaProperties;
  /** Told about failures that are not a message's fault: the store failing (the message is read again), a dead-letter topic refusing a record. @defaultValue `console.error` */
  readonly onError?: (error: unknown) => void;
}

/** A running consumer. */
export interface KafkaConsumer {
  /** Stops the redrive poll, leaves the group after the running messages are settled, and commits the stored offsets. */
  stop(): Promise<void>;
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
  const adapter = 'startKafkaConsumer';
  requireOptions(adapter, options);
  const kafka = requireKafka(adapter, options.kafka);
  const groupId = requireNonEmptyString('groupId', options.groupId, undefined, adapter);
  const topics: unknown[] = Array.isArray(options.topics) ? [...(options.topics as unknown[])] : [];
  if (topics.length === 0 || topics.some((t) => typeof t !== 'string' || t.length === 0)) {
    throw new TypeError(`retrysafe: ${adapter} option "topics" must be a non-empty array of topic names, got ${describe(options.topics)}`);
  }
  const deadLetterTopic = requireFunction<(topic: string) => string>('deadLetterTopic', options.deadLetterTopic ?? ((topic: string) => `${topic}.dlq`), adapter);
  const { redriveIntervalMs, onError } = resolveCommonOptions(adapter, options);
  const concurrency = requireIntegerIn('partitionsConsumedConcurrently', options.partitionsConsumedConcurrently ?? 8, 1, 1_000, adapter);
  const retryDelayMs = requireDurationMs('retryDelayMs', options.retryDelayMs ?? 1_000);
  const commitIntervalMs = requireDurationMs('commitIntervalMs', options.commitIntervalMs ?? 5_000);
  const consumerConfig = requireProperties(adapter, 'consumerConfig', options.consumerConfig, ['group.id', 'enable.auto.commit', 'auto.commit.interval.ms']);
  const deadLetters = new LazyProducer(kafka, requireProducerConfig(adapter, 'deadLetterProducerConfig', options.deadLetterProducerConfig));
  const messageId = requireMessageId(adapter, options.messageId, defaultMessageId);
  const processor = options.process;

  const consumer = kafka.consumer({
    'auto.offset.reset': 'earliest',
    ...consumerConfig,
    'group.id': groupId,
    // The promisified API stores a message's offset only when eachMessage resolves; these commit what it stored.
    'enable.auto.commit': true,
    'auto.commit.interval.ms': commitIntervalMs,
  });
  const inFlight = new InFlight();
  const retryTimers = new Set<NodeJS.Timeout>();
  /** `topic/partition/offset` of messages answered `retry` and not yet settled otherwise. */
  const retried = new Set<string>();

  const settle = async (topic: string, partition: number, message: KafkaJS.KafkaMessage, pause: () => () => void): Promise<void> => {
    const source = `${topic}/${partition}/${message.offset}`;
    const id = extractId(messageId, message);
    let disposition: Disposition;
    try {
      disposition = await processor(toBrokerMessage(message, id, retried.has(source)));
    } catch (error) {
      onError(error);
      disposition = 'retry';
    }
    if (disposition === 'dead_letter' || disposition === 'reject') {
      try {
        await deadLetters.send(deadLetterTopic(topic), deadLetterRecord(message, disposition, source));
      } catch (error) {
        onError(error);
        disposition = 'retry';
      }
    }
    if (disposition !== 'retry') {
      retried.delete(source);
      return;
    }
    retried.add(source);
    const resume = pause();
    const timer = setTimeout(() => {
      retryTimers.delete(timer);
      resume();
    }, retryDelayMs);
    retryTimers.add(timer);
    // Rejecting makes the client seek the partition back to this message instead of storing its offset.
    throw new RetryLater(source);
  };

  await consumer.connect();
  try {
    await consumer.subscribe({ topics: topics as string[] });
    await consumer.run({
      partitionsConsumedConcurrently: concurrency,
      eachMessage: (payload) => {
        const settling = settle(payload.topic, payload.partition, payload.message, () => payload.pause());
        inFlight.add(settling);
        return settling;
      },
    });
  } catch (error) {
    await consumer.disconnect().catch(() => undefined);
    throw error;
  }
  const poller = new RedrivePoller(processor, redriveIntervalMs, onError);
  return Object.freeze({
    async stop(): Promise<void> {
      await poller.stop();
      // Closing waits for the running messages, commits the stored offsets and leaves the group, so its
      // partitions move to the other members at once.
      await consumer.disconnect().catch((error: unknown) => onError(error));
      await inFlight.all();
      for (const timer of retryTimers) clearTimeout(timer);
      await deadLetters.close();
    },
  });
}

/** Thrown out of `eachMessage` to have the partition read the message again; not an error of the message. */
class RetryLater extends Error {
  override readonly name = 'RetryLater';
  constructor(source: string) {
    super(`retrysafe: ${source} is read again after the retry delay`);
  }
}

function defaultMessageId(message: KafkaJS.KafkaMessage): string | undefined {
  const id = headerText(message.headers?.[KAFKA_MESSAGE_ID_HEADER]);
  return id === undefined || id === '' ? undefined : id;
}

function headerText(value: KafkaJS.IHeaders[string]): string | undefined {
  if (value === undefined) return undefined;
  // A header repeated in one record arrives as an array; the last one wins, as in a flattened map.
  const last = Array.isArray(value) ? value[value.length - 1] : value;
  if (last === undefined) return undefined;
  return typeof last === 'string' ? last : last.toString('utf8');
}

function toBrokerMessage(message: KafkaJS.KafkaMessage, id: string | undefined, redelivered: boolean): BrokerMessage {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(message.headers ?? {})) {
    const text = headerText(value);
    if (text !== undefined) headers[name] = text;
  }
  const value = message.value ?? Buffer.alloc(0);
  return { id, headers, body: new Uint8Array(value.buffer, value.byteOffset, value.byteLength), redelivered };
}

function deadLetterRecord(message: KafkaJS.KafkaMessage, reason: 'dead_letter' | 'reject', source: string): KafkaJS.Message {
  return {
    key: message.key,
    value: message.value,
    headers: { ...message.headers, [KAFKA_DEAD_LETTER_REASON_HEADER]: reason, [KAFKA_DEAD_LETTER_SOURCE_HEADER]: source },
  };
}

/** Runs an id extractor; a throw counts as "no id", so the message is rejected rather than crash the consumer. */
function extractId(extractor: (message: KafkaJS.KafkaMessage) => string | undefined, message: KafkaJS.KafkaMessage): string | undefined {
  try {
    return extractor(message);
  } catch {
    return undefined;
  }
}

function requireKafka(adapter: string, kafka: unknown): KafkaJS.Kafka {
  const candidate = kafka as Partial<KafkaJS.Kafka> | null;
  if (typeof candidate !== 'object' || candidate === null || typeof candidate.producer !== 'function' || typeof candidate.consumer !== 'function') {
    throw new TypeError(`retrysafe: ${adapter} option "kafka" must be a KafkaJS.Kafka client of @confluentinc/kafka-javascript, got ${describe(kafka)}`);
  }
  return kafka as KafkaJS.Kafka;
}

function requireProducerConfig(adapter: string, name: string, value: unknown): KafkaProperties {
  return requireProperties(adapter, name, value, Object.keys(IDEMPOTENT_PRODUCER));
}

/** Validates a librdkafka property map that may not set `owned` keys. */
function requireProperties(adapter: string, name: string, value: unknown, owned: readonly string[]): KafkaProperties {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new TypeError(`retrysafe: ${adapter} option "${name}" must be an object of librdkafka properties, got ${describe(value)}`);
  }
  for (const [key, property] of Object.entries(value)) {
    if (owned.includes(key) || key === 'kafkaJS') {
      throw new TypeError(`retrysafe: ${adapter} option "${name}" may not set "${key}" (the transport sets it), got ${describe(property)}`);
    }
    if (!['string', 'number', 'boolean'].includes(typeof property)) {
      throw new TypeError(`retrysafe: ${adapter} option "${name}" property "${key}" must be a string, number or boolean, got ${describe(property)}`);
    }
  }
  return Object.freeze({ ...(value as KafkaProperties) });
}

/**
 * Kafka protocol error codes a retry cannot fix (https://kafka.apache.org/protocol#protocol_error_codes;
 * librdkafka reports broker errors under the same numbers, and checks the size locally under 10 too):
 * MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, TOPIC_AUTHORIZATION_FAILED, INVALID_RECORD.
 */
const PERMANENT = new Set([10, 18, 29, 87]);

function isPermanent(error: unknown): boolean {
  const code: unknown = (error as { code?: unknown } | null)?.code;
  return typeof code === 'number' && PERMANENT.has(code);
}

function isFatal(error: unknown): boolean {
  return (error as { fatal?: unknown } | null)?.fatal === true;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
