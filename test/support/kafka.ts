/**
 * A Kafka cluster for the tests: librdkafka's mock cluster (3 brokers), started inside this process by a
 * client configured with `test.mock.num.brokers`. It listens on 127.0.0.1, so clients in this process and in
 * child processes reach it through {@link MockKafkaCluster.bootstrapServers}; it lives until `close()`.
 */
import { KafkaJS } from '@confluentinc/kafka-javascript';

export interface MockKafkaCluster {
  /** `host:port,…` of its brokers, for `bootstrap.servers`. */
  readonly bootstrapServers: string;
  /** A client of the cluster that logs errors only. */
  client(): KafkaJS.Kafka;
  /** Stops the cluster. */
  close(): Promise<void>;
}

export async function startMockKafkaCluster(brokers = 3): Promise<MockKafkaCluster> {
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
    error: (message) => console.error('mock Kafka cluster:', message),
    namespace: () => logger,
    setLogLevel: () => undefined,
  };
  // `test.mock.num.brokers` is a librdkafka test property the typings leave out; INFO lets the warning through.
  const config = { kafkaJS: { brokers: ['mock:9092'], logger, logLevel: KafkaJS.logLevel.INFO }, 'test.mock.num.brokers': brokers };
  const holder = new KafkaJS.Kafka(config).producer();
  await holder.connect();
  const bootstrapServers = await Promise.race([
    announced,
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the mock Kafka cluster did not announce its brokers')), 10_000).unref()),
  ]);
  return {
    bootstrapServers,
    client: () => new KafkaJS.Kafka({ 'bootstrap.servers': bootstrapServers, log_level: 3 }),
    close: () => holder.disconnect(),
  };
}
