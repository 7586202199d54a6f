/**
 * A Kafka cluster without a Kafka server: librdkafka's mock cluster, started inside this process by a client
 * configured with `test.mock.num.brokers` (a librdkafka test property). Its brokers listen on 127.0.0.1, so
 * clients in this process and in child processes reach them through
 * {@link MockKafkaCluster.bootstrapServers}; it lives until {@link MockKafkaCluster.close}. It speaks the
 * produce, fetch, offset and classic consumer-group protocols; it has no CreateTopics (topics are created
 * on first use, 4 partitions replicated on up to 3 brokers) and holds a new group's first rebalance for
 * 3 seconds, as `group.initial.rebalance.delay.ms` does on a broker.
 *
 * @module
 */
import { KafkaJS } from '@confluentinc/kafka-javascript';

/** A running mock cluster. */
export interface MockKafkaCluster {
  /** `host:port,…` of its brokers, for `bootstrap.servers`. */
  readonly bootstrapServers: string;
  /** A client of the cluster that logs errors only. */
  client(): KafkaJS.Kafka;
  /** Stops the cluster. */
  close(): Promise<void>;
}

/** Options of {@link startMockKafkaCluster}. */
interface MockKafkaOptions {
  /** Brokers in the cluster, 1..9. @defaultValue 3 */
  readonly brokers?: number;
  /** Where the cluster's error log lines go. @defaultValue `console.error` */
  readonly onError?: (message: string) => void;
}

/** Longest wait for the cluster to announce its brokers, in milliseconds. */
const ANNOUNCE_TIMEOUT_MS = 10_000;

/**
 * Starts a mock cluster and resolves once its brokers listen.
 *
 * @throws TypeError when `brokers` is not an integer in [1, 9]
 * @throws Error when the cluster does not announce its brokers within 10 seconds
 * @example
 * ```ts
 * const cluster = await startMockKafkaCluster();
 * const kafka = cluster.client(); // or new KafkaJS.Kafka({ 'bootstrap.servers': cluster.bootstrapServers }) in a child
 * // …
 * await cluster.close();
 * ```
 */
export async function startMockKafkaCluster(options: MockKafkaOptions = {}): Promise<MockKafkaCluster> {
  const brokers = options.brokers ?? 3;
  if (!Number.isSafeInteger(brokers) || brokers < 1 || brokers > 9) {
    throw new TypeError(`retrysafe: option "brokers" must be an integer in [1, 9], got ${String(brokers)}`);
  }
  const onError = options.onError ?? ((message: string) => console.error('mock Kafka cluster:', message));
  let found: (servers: string) => void = () => undefined;
  const announced = new Promise<string>((resolve) => {
    found = resolve;
  });
  // librdkafka announces the mock brokers' addresses in a warning; there is no other API for them.
  const logger: KafkaJS.Logger = {
    info: () => undefined,
    debug: () => undefined,
    warn: (message) => {
      const match = /replaced with (\S+)/.exec(message);
      if (match?.[1] !== undefined) found(match[1]);
    },
    error: (message) => onError(message),
    namespace: () => logger,
    setLogLevel: () => undefined,
  };
  // `test.mock.num.brokers` is a test property the typings leave out; INFO lets the warning through.
  const config = { kafkaJS: { brokers: ['mock:9092'], logger, logLevel: KafkaJS.logLevel.INFO }, 'test.mock.num.brokers': brokers };
  const holder = new KafkaJS.Kafka(config).producer();
  await holder.connect();
  let timer: NodeJS.Timeout | undefined;
  try {
    const bootstrapServers = await Promise.race([
      announced,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('the mock Kafka cluster did not announce its brokers')), ANNOUNCE_TIMEOUT_MS);
      }),
    ]);
    return {
      bootstrapServers,
      client: () => new KafkaJS.Kafka({ 'bootstrap.servers': bootstrapServers, log_level: 3 }),
      close: () => holder.disconnect(),
    };
  } catch (error) {
    await holder.disconnect().catch(() => undefined);
    throw error;
  } finally {
    clearTimeout(timer);
  }
}
