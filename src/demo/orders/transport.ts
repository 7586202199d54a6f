/**
 * What the orders scenario's brokers (`rabbitmq.ts`, `kafka.ts`) have in common, as `broker.ts` and the
 * parent see them: the event's routing key, each broker's endpoint (passed to the workers as JSON), the
 * parent's handle on what the run created, and the workers' publisher and consumer. The broker modules
 * import these from here, and `broker.ts` loads a broker module only when it is chosen, so the imports run
 * one way.
 *
 * @module
 */
import type { MessageProcessor } from '../../messaging/inbox/index.js';
import type { OutboxPublisher } from '../../messaging/outbox/index.js';

/** The routing key (RabbitMQ) and outbox topic of the event. */
export const ORDER_PLACED = 'order.placed';

/** Where the run's events go on RabbitMQ. */
export interface RabbitEndpoint {
  readonly kind: 'rabbitmq';
  /** RabbitMQ URL. */
  readonly url: string;
  /** The run's exchange (the relay publishes to it). */
  readonly exchange: string;
  /** The run's queue (the consumer reads it). */
  readonly queue: string;
}

/** Where the run's events go on Kafka. */
export interface KafkaEndpoint {
  readonly kind: 'kafka';
  /** `host:port,…` of the brokers. */
  readonly bootstrapServers: string;
  /** The run's topic (the relay publishes to it, keyed by order id). */
  readonly topic: string;
  /** The billing consumer's group. */
  readonly groupId: string;
}

/** Where the run's events go, as the worker processes are told. */
export type BrokerEndpoint = RabbitEndpoint | KafkaEndpoint;

/** The parent's handle on the run's broker side. */
export interface RunBroker {
  readonly endpoint: BrokerEndpoint;
  /** What the run created there, for the interruption message, e.g. `exchange retrysafe.orders.1a2b3c4d`. */
  readonly created: readonly string[];
  /**
   * Events the consumer has not settled yet: on RabbitMQ the messages ready in the queue (not those delivered
   * and unacknowledged), on Kafka the group's lag (records past its committed offsets).
   */
  backlog(): Promise<number>;
  /** Removes what the run created and closes the connections. */
  dispose(): Promise<void>;
}

/** A running consumer of a worker process. */
interface WorkerConsumer {
  /** Stops taking messages, settles those in flight, and closes the connection. */
  stop(): Promise<void>;
}

/** What a worker process uses of the broker. */
export interface WorkerTransport {
  /** The relay's publisher to the run's exchange or topic. */
  publisher(): OutboxPublisher;
  /** Starts the billing consumer on the run's queue or topic. */
  consume(process: MessageProcessor, onError: (error: unknown) => void): Promise<WorkerConsumer>;
}
