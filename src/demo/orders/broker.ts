/**
 * The orders scenario's broker, RabbitMQ or Kafka, chosen per run. Each broker's module (`rabbitmq.ts`,
 * `kafka.ts`) is imported only when that broker is chosen, so a run on one does not need the other's client
 * package; what they share (endpoints, the parent's and the workers' handles) is in `transport.ts`.
 *
 * @module
 */
import type { BrokerEndpoint, WorkerTransport } from './transport.js';

/** A broker the scenario runs on. */
export type BrokerName = BrokerEndpoint['kind'];

/** Loads the transport of `endpoint`'s broker (its client package with it). */
export async function workerTransport(endpoint: BrokerEndpoint): Promise<WorkerTransport> {
  return endpoint.kind === 'kafka' ? (await import('./kafka.js')).kafkaTransport(endpoint) : (await import('./rabbitmq.js')).rabbitTransport(endpoint);
}
