/**
 * The orders scenario on RabbitMQ: a direct exchange and a durable queue per run, bound on `order.placed`
 * and deleted at the end; the relay publishes with publisher confirms (`createAmqpPublisher`), the consumer
 * reads with manual acks (`startAmqpConsumer`, 16 unacknowledged at most).
 *
 * @module
 */
import amqplib from 'amqplib';
import { createAmqpPublisher, startAmqpConsumer } from '../../messaging/transports/amqp.js';
import { ORDER_PLACED, type RabbitEndpoint, type RunBroker, type WorkerTransport } from './transport.js';

/** Deliveries the consumer holds unacknowledged at once. */
const PREFETCH = 16;

/**
 * Declares `retrysafe.orders.<run>` (direct, durable) and `retrysafe.orders.<run>.billing` (durable)
 * bound to it on {@link ORDER_PLACED}.
 *
 * @throws the driver's error when RabbitMQ is unreachable or refuses
 */
export async function declareRabbitBroker(url: string, runId: string): Promise<RunBroker> {
  const connection = await amqplib.connect(url);
  try {
    const channel = await connection.createChannel();
    const exchange = `retrysafe.orders.${runId}`;
    const queue = `${exchange}.billing`;
    await channel.assertExchange(exchange, 'direct', { durable: true });
    await channel.assertQueue(queue, { durable: true });
    await channel.bindQueue(queue, exchange, ORDER_PLACED);
    return {
      endpoint: { kind: 'rabbitmq', url, exchange, queue },
      created: [`exchange ${exchange}`, `queue ${queue}`],
      backlog: async () => (await channel.checkQueue(queue)).messageCount,
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

/** The workers' side: publish to the run's exchange, consume the run's queue. */
export function rabbitTransport(endpoint: RabbitEndpoint): WorkerTransport {
  return {
    publisher: () => createAmqpPublisher({ url: endpoint.url, exchange: endpoint.exchange }),
    async consume(process, onError) {
      const connection = await amqplib.connect(endpoint.url);
      try {
        const channel = await connection.createChannel();
        const consumer = await startAmqpConsumer({ channel, queue: endpoint.queue, process, prefetch: PREFETCH, redriveIntervalMs: false, onError });
        return {
          async stop(): Promise<void> {
            await consumer.stop();
            await connection.close();
          },
        };
      } catch (error) {
        await connection.close().catch(() => undefined);
        throw error;
      }
    },
  };
}
