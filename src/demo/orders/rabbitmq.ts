/**
 * The orders scenario's RabbitMQ side: a direct exchange and a queue per run, bound on `order.placed`,
 * deleted at the end.
 *
 * @module
 */
import amqplib from 'amqplib';

/** The routing key (and outbox topic) of the event. */
export const ORDER_PLACED = 'order.placed';

/** The run's exchange and queue, and a way to read the queue's depth and remove both. */
export interface RunBroker {
  readonly exchange: string;
  readonly queue: string;
  /** Messages ready in the queue (not counting those delivered and unacknowledged). */
  ready(): Promise<number>;
  /** Deletes the queue and the exchange and closes the connection. */
  dispose(): Promise<void>;
}

/**
 * Declares `retrysafe.orders.<run>` (direct, durable) and `retrysafe.orders.<run>.billing` (durable)
 * bound to it on {@link ORDER_PLACED}.
 *
 * @throws the driver's error when RabbitMQ is unreachable or refuses
 */
export async function declareRunBroker(url: string, runId: string): Promise<RunBroker> {
  const connection = await amqplib.connect(url);
  try {
    const channel = await connection.createChannel();
    const exchange = `retrysafe.orders.${runId}`;
    const queue = `${exchange}.billing`;
    await channel.assertExchange(exchange, 'direct', { durable: true });
    await channel.assertQueue(queue, { durable: true });
    await channel.bindQueue(queue, exchange, ORDER_PLACED);
    return {
      exchange,
      queue,
      ready: async () => (await channel.checkQueue(queue)).messageCount,
      async dispose(): Promise<void> {
        await channel.deleteQueue(queue);
        await channel.deleteExchange(exchange);
        await connection.close();
      },
    };
  } catch (error) {
    await connection.close().catch(() => undefined);
    throw error;
  }
}
