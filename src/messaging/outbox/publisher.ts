/**
 * The contract between the relay and a broker: one message in, a promise that settles on the broker's
 * confirm. Implementations: `transports/amqp.ts` (RabbitMQ publisher confirms), `transports/nats.ts`
 * (JetStream PubAck), `transports/kafka.ts` (the partition leader's acks=all acknowledgement) and
 * `transports/webhook.ts` (HTTP 2xx).
 *
 * @module
 */

/** One outbox message as the relay hands it to a publisher. */
export interface OutboxMessage {
  /** The id fixed at enqueue (a UUID); every attempt carries the same one, so consumers can deduplicate. */
  readonly id: string;
  /** Where it goes: a routing key, a subject or a webhook name, as the publisher interprets it. */
  readonly topic: string;
  /** The ordering key: messages of one key are published in enqueue order, one at a time. */
  readonly key: string;
  /** The body bytes. */
  readonly payload: Uint8Array;
  /** Headers given at enqueue. */
  readonly headers: Readonly<Record<string, string>>;
  /** Which attempt this is, from 1. */
  readonly attempt: number;
  /** When it was enqueued, milliseconds since the epoch (the outbox's clock). */
  readonly createdAt: number;
}

/**
 * A broker publisher. `publish` resolves only once the broker has taken responsibility for the message
 * (confirm, PubAck, 2xx) and rejects otherwise; throw a `PublishError` with `permanent: true` when a retry
 * cannot help. It may be called concurrently for messages of different keys. `signal` aborts when the
 * relay's publish timeout fires.
 */
export interface OutboxPublisher {
  publish(message: OutboxMessage, signal: AbortSignal): Promise<void>;
  /** Releases connections the publisher opened itself. */
  close(): Promise<void>;
}
