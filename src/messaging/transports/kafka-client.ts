/**
 * What the Kafka publisher and consumers share: librdkafka property checks, and the idempotent producer
 * (`acks=all`) connected on first use, that the outbox publisher and the consumers' dead-letter topics send with.
 *
 * @module
 */
import type { KafkaJS } from '@confluentinc/kafka-javascript';
import { describe } from '../../core/validate.js';
import { PublishError } from '../outbox/errors.js';

/** librdkafka properties (https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md), e.g. `{ 'linger.ms': 0 }`. */
export type KafkaProperties = Readonly<Record<string, string | number | boolean>>;

/**
 * Producer settings the transport owns: idempotence (KIP-98) so a librdkafka retry after a lost produce
 * response never writes a second copy nor reorders a partition, and `acks=all` so a confirmed message is
 * on every in-sync replica.
 */
const IDEMPOTENT_PRODUCER = { 'enable.idempotence': true, acks: -1 } as const;

/** An idempotent producer connected on first use, replaced after a fatal error. */
export class LazyProducer {
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

/** `kafka` if it is a `KafkaJS.Kafka` client. @throws TypeError naming the option otherwise */
export function requireKafka(adapter: string, kafka: unknown): KafkaJS.Kafka {
  const candidate = kafka as Partial<KafkaJS.Kafka> | null;
  if (typeof candidate !== 'object' || candidate === null || typeof candidate.producer !== 'function' || typeof candidate.consumer !== 'function') {
    throw new TypeError(`retrysafe: ${adapter} option "kafka" must be a KafkaJS.Kafka client of @confluentinc/kafka-javascript, got ${describe(kafka)}`);
  }
  return kafka as KafkaJS.Kafka;
}

/** Validates extra producer properties, which may not set `enable.idempotence` or `acks`. @throws TypeError naming the option */
export function requireProducerConfig(adapter: string, name: string, value: unknown): KafkaProperties {
  return requireProperties(adapter, name, value, Object.keys(IDEMPOTENT_PRODUCER));
}

/**
 * Validates a librdkafka property map that may not set `owned` keys.
 * @throws TypeError naming the option and the property otherwise
 */
export function requireProperties(adapter: string, name: string, value: unknown, owned: readonly string[]): KafkaProperties {
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
