/**
 * A Kafka cluster for the tests: librdkafka's mock cluster (3 brokers), started inside this process by a
 * client configured with `test.mock.num.brokers`; the same one `retrysafe demo --scenario orders --broker
 * kafka` runs. Clients in this process and in child processes reach it through `bootstrapServers`.
 */
export { startMockKafkaCluster, type MockKafkaCluster } from '../../src/demo/harness/mock-kafka.js';
