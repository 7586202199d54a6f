/**
 * What the Kafka consumers (`startKafkaConsumer`, `startKafkaBatchConsumer`) share: the consumer-group
 * options and their checks, joining the group, settling a record that is dead-lettered or read again after
 * `retry`, and stopping.
 *
 * @module
 */
import type { KafkaJS } from '@confluentinc/kafka-javascript';
import { describe, requireDurationMs, requireFunction, requireIntegerIn, requireNonEmptyString } from '../../core/validate.js';
import type { Disposition, RedriveOptions } from '../inbox/processor.js';
import { LazyProducer, requireKafka, requireProducerConfig, requireProperties, type KafkaProperties } from './kafka-client.js';
import { deadLetterRecord, defaultMessageId } from './kafka-records.js';
import { InFlight, RedrivePoller, requireMessageId, resolveCommonOptions } from './runner.js';

/** The options both Kafka consumers take. */
export interface KafkaGroupOptions extends RedriveOptions {
  /** The client (`new KafkaJS.Kafka({ 'bootstrap.servers': … })`) carrying brokers, TLS and SASL. */
  readonly kafka: KafkaJS.Kafka;
  /** The consumer group (`group.id`); the partitions of `topics` are shared among its members. */
  readonly groupId: string;
  /** The topics to consume. */
  readonly topics: readonly string[];
  /** The dead-letter topic of a topic. @defaultValue `` `${topic}.dlq` `` */
  readonly deadLetterTopic?: (topic: string) => string;
  /** Partitions handled at once (one message, or one batch, at a time per partition). @defaultValue 8 */
  readonly partitionsConsumedConcurrently?: number;
  /** The id used for dedup. @defaultValue the `Retrysafe-Message-Id` header (`KAFKA_MESSAGE_ID_HEADER`) */
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

/** The validated {@link KafkaGroupOptions}, the dead-letter producer and the retry pauses of one consumer. */
export class KafkaGroup {
  readonly topics: string[];
  readonly concurrency: number;
  readonly messageId: (message: KafkaJS.KafkaMessage) => string | undefined;
  readonly onError: (error: unknown) => void;
  readonly consumer: KafkaJS.Consumer;
  readonly inFlight = new InFlight();
  private readonly redriveIntervalMs: number | false;
  private readonly deadLetterTopic: (topic: string) => string;
  private readonly retryDelayMs: number;
  private readonly deadLetters: LazyProducer;
  private readonly retryTimers = new Set<NodeJS.Timeout>();
  /** `topic/partition/offset` of messages answered `retry` and not yet settled otherwise. */
  private readonly retried = new Set<string>();

  /**
   * @param extra - librdkafka consumer properties the consumer sets itself (they may not be in `consumerConfig`)
   * @throws TypeError naming the option when an option is invalid
   */
  constructor(adapter: string, options: KafkaGroupOptions & { readonly process?: unknown }, extra: KafkaProperties = {}) {
    const kafka = requireKafka(adapter, options.kafka);
    const groupId = requireNonEmptyString('groupId', options.groupId, undefined, adapter);
    const topics: unknown[] = Array.isArray(options.topics) ? [...(options.topics as unknown[])] : [];
    if (topics.length === 0 || topics.some((t) => typeof t !== 'string' || t.length === 0)) {
      throw new TypeError(`retrysafe: ${adapter} option "topics" must be a non-empty array of topic names, got ${describe(options.topics)}`);
    }
    this.topics = topics as string[];
    this.deadLetterTopic = requireFunction<(topic: string) => string>('deadLetterTopic', options.deadLetterTopic ?? ((topic: string) => `${topic}.dlq`), adapter);
    ({ redriveIntervalMs: this.redriveIntervalMs, onError: this.onError } = resolveCommonOptions(adapter, options));
    this.concurrency = requireIntegerIn('partitionsConsumedConcurrently', options.partitionsConsumedConcurrently ?? 8, 1, 1_000, adapter);
    this.retryDelayMs = requireDurationMs('retryDelayMs', options.retryDelayMs ?? 1_000);
    const commitIntervalMs = requireDurationMs('commitIntervalMs', options.commitIntervalMs ?? 5_000);
    const owned = ['group.id', 'enable.auto.commit', 'auto.commit.interval.ms', ...Object.keys(extra)];
    const consumerConfig = requireProperties(adapter, 'consumerConfig', options.consumerConfig, owned);
    this.deadLetters = new LazyProducer(kafka, requireProducerConfig(adapter, 'deadLetterProducerConfig', options.deadLetterProducerConfig));
    this.messageId = requireMessageId(adapter, options.messageId, defaultMessageId);
    this.consumer = kafka.consumer({
      'auto.offset.reset': 'earliest',
      ...consumerConfig,
      ...extra,
      'group.id': groupId,
      // The client stores an offset only once its message is settled; these commit what it stored.
      'enable.auto.commit': true,
      'auto.commit.interval.ms': commitIntervalMs,
    });
  }

  /** Whether `source` (`topic/partition/offset`) was answered `retry` before and read again since. */
  wasRetried(source: string): boolean {
    return this.retried.has(source);
  }

  /**
   * Publishes a `dead_letter` or `reject` record to its dead-letter topic and waits for the acknowledgement;
   * answers `retry` when that publish fails (reported to `onError`), the disposition otherwise.
   */
  async deadLetter(topic: string, message: KafkaJS.KafkaMessage, disposition: Disposition, source: string): Promise<Disposition> {
    if (disposition !== 'dead_letter' && disposition !== 'reject') return disposition;
    try {
      await this.deadLetters.send(this.deadLetterTopic(topic), deadLetterRecord(message, disposition, source));
      return disposition;
    } catch (error) {
      this.onError(error);
      return 'retry';
    }
  }

  /** Forgets a settled record's earlier `retry`. */
  settled(source: string): void {
    this.retried.delete(source);
  }

  /**
   * Pauses the partition for `retryDelayMs` and throws, which makes the client seek the partition back to
   * the record at `source` instead of storing its offset.
   */
  retryLater(source: string, pause: () => () => void): never {
    this.retried.add(source);
    const resume = pause();
    const timer = setTimeout(() => {
      this.retryTimers.delete(timer);
      resume();
    }, this.retryDelayMs);
    this.retryTimers.add(timer);
    throw new RetryLater(source);
  }

  /**
   * Connects, subscribes and runs `run` (`eachMessage` or `eachBatch`), and answers the running consumer.
   * @throws the driver's error when the brokers cannot be reached or the subscription fails
   */
  async start(run: KafkaJS.ConsumerRunConfig, processor: { readonly redrivePending?: () => Promise<number> }): Promise<KafkaConsumer> {
    await this.consumer.connect();
    try {
      await this.consumer.subscribe({ topics: this.topics });
      await this.consumer.run({ partitionsConsumedConcurrently: this.concurrency, ...run });
    } catch (error) {
      await this.consumer.disconnect().catch(() => undefined);
      throw error;
    }
    const poller = new RedrivePoller(processor, this.redriveIntervalMs, this.onError);
    return Object.freeze({
      stop: async (): Promise<void> => {
        await poller.stop();
        // Closing waits for the running messages, commits the stored offsets and leaves the group, so its
        // partitions move to the other members at once.
        await this.consumer.disconnect().catch((error: unknown) => this.onError(error));
        await this.inFlight.all();
        for (const timer of this.retryTimers) clearTimeout(timer);
        await this.deadLetters.close();
      },
    });
  }
}

/** Thrown out of `eachMessage` / `eachBatch` to have the partition read a record again; not an error of the record. */
class RetryLater extends Error {
  override readonly name = 'RetryLater';
  constructor(source: string) {
    super(`retrysafe: ${source} is read again after the retry delay`);
  }
}
